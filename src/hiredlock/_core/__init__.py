"""The algorithm, written once, with no I/O and no waiting: requests, judgement, scripts, the lock
kinds' steps, session and client."""
