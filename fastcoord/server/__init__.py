"""The network server (Trio): listener, connections, clock task, dispatch to the core."""
