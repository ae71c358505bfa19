"""The emulated path: link specs, namespaces and devices, and the two link backends."""
