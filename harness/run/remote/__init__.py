"""A server on another host over ssh: the control channel, its agent, clocks and the measured
path."""
