"""The blocking API's own parts: the local gate of a lock object, the renewal thread."""
