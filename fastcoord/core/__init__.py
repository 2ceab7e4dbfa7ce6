"""The coordinator core, sans-IO: Kafka's GroupCoordinator driven by calls with `now_ms`.

Never touches a socket, a thread or the clock. Handlers take a decoded request and the
time, and return a Result: responses ready now, records to persist, timer changes and
events. Durable state changes only by replaying records.
"""
