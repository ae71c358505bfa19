"""The erasure-coded ``fec`` protocol: wire, messages, session (sans-I/O), code, loss and its
asyncio edge."""
