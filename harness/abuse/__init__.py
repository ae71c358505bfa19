"""``testbed abuse``: the servers under attack on loopback, as a benchmark."""
