import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Arrays;
import java.util.Collection;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.stream.Collectors;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * One member of a consumer group, run by the Java client (KafkaConsumer) as an application
 * would run it, for tests that drive it from another language (fastcoord.testing_java).
 *
 * <p>Usage: {@code GroupMember TOPIC[,TOPIC...] [PROPERTY=VALUE ...]}: the properties are the
 * consumer's own (bootstrap.servers, group.id, group.protocol, session.timeout.ms, ...).
 *
 * <p>Each event is one line on stdout: {@code assigned T-P,T-P}, {@code revoked ...} and
 * {@code lost ...} from the rebalance listener; {@code committed T P OFFSET} and {@code
 * fetched T P OFFSET} (-1: none) in answer to commands; {@code error WHAT: EXCEPTION}; and
 * {@code closed} once close() has returned. Commands come one a line on stdin: {@code commit
 * T P OFFSET}, {@code fetch T P}, {@code close}; the end of stdin closes too, so a member
 * whose driver died leaves its group. The consumer is not thread-safe, so the poll loop
 * runs the commands; stdin is read by a thread of its own.
 */
public final class GroupMember {
  private static final Duration POLL = Duration.ofMillis(100);

  public static void main(String[] args) {
    if (args.length < 1) {
      System.err.println("usage: GroupMember TOPIC[,TOPIC...] [PROPERTY=VALUE ...]");
      System.exit(2);
    }
    Properties config = new Properties();
    config.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
    config.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
    // Offsets move only when the driver says so.
    config.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
    for (String arg : Arrays.copyOfRange(args, 1, args.length)) {
      int eq = arg.indexOf('=');
      if (eq < 1) {
        System.err.println("not PROPERTY=VALUE: " + arg);
        System.exit(2);
      }
      config.put(arg.substring(0, eq), arg.substring(eq + 1));
    }

    BlockingQueue<String> commands = new LinkedBlockingQueue<>();
    Thread stdin = new Thread(() -> read(commands), "stdin");
    stdin.setDaemon(true);
    stdin.start();

    KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(config);
    consumer.subscribe(Arrays.asList(args[0].split(",")), new Listener());
    while (true) {
      String command = commands.poll();
      if (command == null) {
        try {
          consumer.poll(POLL);
        } catch (RuntimeException e) {
          emit("error poll: " + e);
        }
      } else if (command.trim().equals("close")) {
        break;
      } else if (!command.isBlank()) {
        run(consumer, command.trim().split("\\s+"));
      }
    }
    consumer.close();
    emit("closed");
  }

  private static void run(KafkaConsumer<byte[], byte[]> consumer, String[] words) {
    String command = String.join(" ", words);
    try {
      if (words[0].equals("commit") && words.length == 4) {
        TopicPartition partition = new TopicPartition(words[1], Integer.parseInt(words[2]));
        long offset = Long.parseLong(words[3]);
        consumer.commitSync(Map.of(partition, new OffsetAndMetadata(offset)));
        emit(String.format("committed %s %d %d", words[1], partition.partition(), offset));
      } else if (words[0].equals("fetch") && words.length == 3) {
        TopicPartition partition = new TopicPartition(words[1], Integer.parseInt(words[2]));
        OffsetAndMetadata committed = consumer.committed(Set.of(partition)).get(partition);
        long offset = committed == null ? -1 : committed.offset();
        emit(String.format("fetched %s %d %d", words[1], partition.partition(), offset));
      } else {
        emit("error " + command + ": unknown command");
      }
    } catch (RuntimeException e) {
      emit("error " + command + ": " + e);
    }
  }

  private static void read(BlockingQueue<String> commands) {
    try (BufferedReader in =
        new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
      for (String line = in.readLine(); line != null; line = in.readLine()) {
        commands.add(line);
      }
    } catch (IOException e) {
      emit("error stdin: " + e);
    }
    commands.add("close");
  }

  // Lines from the listener (in the poll loop) and from the stdin thread never interleave.
  private static synchronized void emit(String line) {
    System.out.println(line);
    System.out.flush();
  }

  private static final class Listener implements ConsumerRebalanceListener {
    @Override
    public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
      emit("assigned " + join(partitions));
    }

    @Override
    public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
      emit("revoked " + join(partitions));
    }

    @Override
    public void onPartitionsLost(Collection<TopicPartition> partitions) {
      emit("lost " + join(partitions));
    }

    private static String join(Collection<TopicPartition> partitions) {
      return partitions.stream()
          .map(TopicPartition::toString)
          .sorted()
          .collect(Collectors.joining(","));
    }
  }
}
