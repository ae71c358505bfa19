"""The userspace link emulator (Mahimahi style): TUN devices in the client and server
namespaces, and one process that moves IP packets between them through a queue, a rate,
a delay and a loss model per direction.

Modules: :mod:`~netem.emulator.core` (sans-I/O direction), :mod:`~netem.emulator.loss`,
:mod:`~netem.emulator.clock` (timerfd), :mod:`~netem.emulator.tun`,
:mod:`~netem.emulator.engine` (asyncio edge), :mod:`~netem.emulator.pcap`,
:mod:`~netem.emulator.packetlog`, :mod:`~netem.emulator.control` (socket and client),
:mod:`~netem.emulator.stats`; the per-packet path in C that moves the packets by default
(:mod:`~netem.emulator.cpath` configures it, :mod:`~netem.emulator.cengine` runs its thread
and answers the control commands, :mod:`~netem.emulator.options` chooses between it and the
Python reference; sources in ``csrc/``); the process and its contract with the topology:
:mod:`netem.emulator.__main__`.
"""
