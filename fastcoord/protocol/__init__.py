"""The Kafka wire protocol, sans-IO: bytes in, typed messages out, and back.

Never touches a socket, a thread or the clock. Entry points live in frames.py; message
declarations in messages/; the served-version table in versions.py.
"""
