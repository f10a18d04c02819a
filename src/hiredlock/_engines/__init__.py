"""The engines that move bytes (native and pure Python), their contract, and what they share:
connect, TLS, RESP, poller, resolver, pool, the blocking driver."""
