"""QUIC for both ends: configuration, pacing, congestion controls and the datagram edge
(aioquic)."""
