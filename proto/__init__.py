"""The protocol layer beneath clients/ and servers/: TLS, socket options, HTTP/2 helpers,
priorities, QUIC (configuration, congestion controls, the one adapter to aioquic's
internals) and the FEC protocol. Clients and servers import it, never each other."""
