"""A deterministic simulation of hiredlock: the library's own step generators (hiredlock._core) for
many clients, against masters in memory (hiredlock.testing's MemoryStore), on one seeded virtual
clock, with faults, and invariants checked at every virtual instant. `python -m sim --help`;
`make sim` runs a campaign; tests/sim/ runs the CI part and the broken variants (sim/variants.py).
"""
