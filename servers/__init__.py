"""HTTP/2 and HTTP/3 servers carrying the fixed workloads."""
