"""The blocking API's own parts: the local gate of a lock object, the renewal thread, the direct
form of a lock's steps (generated at build time)."""
