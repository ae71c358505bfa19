"""Instrumented HTTP/2 and HTTP/3 clients."""
