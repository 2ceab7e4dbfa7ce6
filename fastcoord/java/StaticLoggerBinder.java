package org.slf4j.impl;

import java.lang.reflect.Proxy;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import org.slf4j.ILoggerFactory;
import org.slf4j.Logger;
import org.slf4j.Marker;
import org.slf4j.helpers.FormattingTuple;
import org.slf4j.helpers.MessageFormatter;
import org.slf4j.spi.LoggerFactoryBinder;

/**
 * GroupMember's slf4j 1.7 binding: the Kafka client's log lines at or above the level of the
 * system property groupmember.log (warn unless set; off for none) go to stderr, one a line.
 *
 * <p>With no binding on the class path slf4j drops every line, after a warning of its own; with
 * this one, a test that fails shows the client's warnings, and the member's stdout still
 * carries its events alone. No logging library is needed beside kafka-clients' slf4j-api.
 */
public final class StaticLoggerBinder implements LoggerFactoryBinder {
  // slf4j checks that the binding was built for its version.
  public static String REQUESTED_API_VERSION = "1.7.36";

  private static final StaticLoggerBinder SINGLETON = new StaticLoggerBinder();
  private static final List<String> LEVELS = List.of("trace", "debug", "info", "warn", "error");
  private static final int THRESHOLD = threshold(System.getProperty("groupmember.log", "warn"));

  public static StaticLoggerBinder getSingleton() {
    return SINGLETON;
  }

  @Override
  public ILoggerFactory getLoggerFactory() {
    return StaticLoggerBinder::logger;
  }

  @Override
  public String getLoggerFactoryClassStr() {
    return StaticLoggerBinder.class.getName();
  }

  private static int threshold(String level) {
    int index = LEVELS.indexOf(level.toLowerCase(Locale.ROOT));
    return index < 0 ? LEVELS.size() : index; // "off", or anything unknown: nothing
  }

  // A Logger has some sixty methods, each a level's name or is<Level>Enabled, with an
  // optional Marker first: one handler serves them all.
  private static Logger logger(String name) {
    return (Logger)
        Proxy.newProxyInstance(
            Logger.class.getClassLoader(),
            new Class<?>[] {Logger.class},
            (proxy, method, args) -> {
              String call = method.getName();
              switch (call) {
                case "getName":
                case "toString":
                  return name;
                case "hashCode":
                  return System.identityHashCode(proxy);
                case "equals":
                  return proxy == args[0];
                default:
                  break;
              }
              if (call.startsWith("is")) {
                return enabled(call.substring(2, call.length() - "Enabled".length()));
              }
              if (enabled(call)) {
                log(call, name, args);
              }
              return null;
            });
  }

  private static boolean enabled(String level) {
    return LEVELS.indexOf(level.toLowerCase(Locale.ROOT)) >= THRESHOLD;
  }

  private static void log(String level, String name, Object[] args) {
    int first = args[0] instanceof Marker ? 1 : 0;
    Object[] rest = Arrays.copyOfRange(args, first + 1, args.length);
    if (rest.length == 1 && rest[0] instanceof Object[]) {
      rest = (Object[]) rest[0]; // the varargs form
    }
    FormattingTuple line = MessageFormatter.arrayFormat((String) args[first], rest);
    String cause = line.getThrowable() == null ? "" : " (" + line.getThrowable() + ")";
    System.err.println(level.toUpperCase(Locale.ROOT) + " " + name + ": " + line.getMessage() + cause);
  }
}
