"""The testbed's native HTTP/3 endpoint: ``tb-h3`` (tbh3.c, on libngtcp2 0.12 and libnghttp3
0.8) does the per-datagram work; :mod:`proto.native.wire` is the control protocol its Python
edge speaks (sans-I/O), :mod:`proto.native.engine` that edge, :mod:`proto.native.build` how
the binary is made."""
