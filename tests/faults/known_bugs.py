"""Library bugs found by the fault tests, with their analysis (each is pinned by a test).  A test
whose liveness check fails in a way an open one explains xfails with its text; its safety checks
still apply."""

from __future__ import annotations

# B1 (FIXED upstream in bfba2ba, "lagging only set"): the python engine's _abandon() cleared a
# master's `lagging` flag after a round decided early, so a frozen or slow minority cost every
# release, extend and fence raise a full master_timeout (native: only the first).  Pinned by
# tests/faults/test_regressions.py::test_frozen_minority_costs_release_one_timeout.
B1 = "library bug B1 (fixed in bfba2ba)"


def liveness_bug(engine: str, fault_kind: str) -> tuple[str, set] | None:
    """The open known bug that explains a liveness shortfall of a minority scenario, with the
    kinds of shortfall it explains (none open now: B1, the python engine's, is fixed)."""
    return None


# B2 (FIXED): release and the unlock after a failed attempt were sent as EVALSHA; a master without
# the script answered NOSCRIPT and the engine then sent EVAL.  When that reply was lost
# (drop_replies) or came after the round (a slow master) and the client made no further round, the
# EVAL was never sent and the master kept the key until its ttl.  Fixed: each connection remembers
# which scripts have run on it; until one has, it is sent as EVAL.  Pinned by
# tests/faults/test_lost_replies.py::*[*-flushed] and
# tests/faults/test_regressions.py::test_unlock_with_a_late_noscript.
# Left: a script cache flushed (SCRIPT FLUSH) under a live connection that has run the script,
# and then a lost NOSCRIPT reply; the EVAL goes out with that connection's next round.
B2 = "library bug B2 (fixed)"

# B3 (FIXED upstream in e5f0a8d): the python engine reported -LOADING as CONN_ERROR without
# its code (redis-py's BusyLoadingError is a ConnectionError) and dropped the "ERR" code of
# generic error replies; the native engine reported ERROR with the server's text.  Pinned by
# tests/faults/test_error_replies.py::test_loading and
# tests/faults/test_regressions.py::test_generic_error_keeps_its_code.
B3 = "library bug B3 (fixed in e5f0a8d)"


# B4 (FIXED): native engine.  A connection the master closed (restart, CLIENT KILL) was not always
# replaced in the next round, which then voted CONN_ERROR "Server closed the connection".  Two
# causes: (1) _refresh skipped connections used less than 1 ms before (reverted in 066326f:
# every open connection is looked at); (2) when a skipped reply and the end of the stream arrived
# together (a master that answered, then died), _refresh read the reply but not the end, and
# kept the connection (3 of 15 runs): it now asks poll() for POLLRDHUP (elsewhere the socket,
# hl_peer_closed) and replaces such a connection.  Pinned by
# tests/faults/test_regressions.py::test_restarted_masters_used_in_the_next_round and
# ::test_connections_closed_by_the_server_are_replaced.
B4 = "library bug B4 (fixed)"


# B5 (FIXED: the keys' TTL is only ever lengthened): fair lock.  FAIR_ACQUIRE
# (src/hiredlock/_core/scripts.py) set the queue's keys
# hiredlock:fair:q:/e:<name> to expire one waiting window after *this* attempt, the calling
# client's window (3 x retry_delay + 2 master timeouts): `pexpire KEYS[2] ARGV[5]` unconditional.
# An attempt by a client with a shorter window (a smaller retry_delay or master_timeout) thus
# shortens the keys under a waiter whose window is longer; when no attempt touches them for that
# short window (the quick client left; the waiter's next attempt is up to 1.5 x its retry_delay
# away) the keys expire with the waiter's ticket, and a call made later finds the queue empty and
# takes the lock first: grant order != request order with no fault at all (README "Fair lock":
# "A waiter keeps its place while it keeps trying").  E.g. a waiter with retry_delay=1.0 (window
# 3.1 s): one acquire(blocking=False) by a client with retry_delay=0.01 cuts the keys' PTTL from
# 3050 to 129 ms.  Pinned by
# tests/faults/test_fairlock.py::test_a_shorter_window_keeps_a_waiters_place.
B5 = "library bug B5 (fixed): a shorter-window client's attempt shortened the fair queue's TTL"

# B6 (FIXED: a ticket stays queued until its call ends; where it took the lock, for as long as
# that key, and a failed attempt's unlock gives it the whole window back): fair lock.
# FAIR_ACQUIRE removed the ticket from a master's queue as soon as the
# attempt takes the lock *on that master*, before the round knows whether it won a quorum.  An
# attempt that wins only some masters (the lock still held on the others: a release not applied
# there yet, a holder known on some masters only, a faulted master) fails, unlocks, and leaves
# its ticket missing from the masters it won; until its next attempt puts it back, a later
# waiter is first there and takes the lock on them, against the README's "all masters' queues
# agree, and no two waiters can each be first on part of the masters".  Two waiters woken
# together then hand those masters to each other at every attempt (each partial win removes the
# winner's ticket where it won): seen as a 1.2 s stall of the whole queue, 5 of 36 calls timing
# out, in faults/test_fairlock's drop_replies scenario (async API, python engine; each failed
# attempt of the head voted TIMEOUT, TIMEOUT, OK, TAKEN, TAKEN).  Pinned by
# tests/faults/test_fairlock.py::test_a_minority_win_keeps_the_waiters_place.
B6 = "library bug B6 (fixed): a fair attempt that won a minority dropped its ticket there"


# B7 (OPEN): semaphore under a stopped minority (2 of 5 masters SIGSTOPped, so every acquire needs
# all three live masters).  Contenders racing for the same free permit take it on different live
# masters (ACQUIRE_FIRST_FREE takes the first free permit in each master's own arrival order),
# every such attempt fails with votes like TIMEOUT, TIMEOUT, OK, TAKEN, TAKEN, and its unlock
# announces a release that wakes the other waiters at once, so the split repeats; a few calls of
# 120 reach their 2 s timeout (95-98% succeed).  Safety holds: occupancy never above the permits, no
# key left.  Seen in 2 of 4 full runs on a 2-vCPU VM (one of them idle) and in 2 of 32 isolated
# runs of the sync scenario.  The fair lock had the same vote pattern (B6, fixed by keeping the
# waiter's place); a semaphore needs its own remedy (e.g. no release notice from the unlock of a
# failed attempt, or a per-attempt permit order shared by the contenders).  Until then its
# sigstop scenario xfails on the contended success rate only (faults/test_semaphore.py).
B7 = "library bug B7 (open): semaphore contenders split a free permit across the live masters"
B7_EXPLAINS = {"contended_rate"}


# B8 (FIXED): a client closed while a stopped master still owes it many replies.  20 asyncio tasks
# each acquire, extend, inspect (four read-only rounds) and release one name while master 0 of 5 is
# SIGSTOPped; the client is then closed, and master 0 resumed.  Every command was written to
# master 0's socket (nothing left unsent at close: 141 replies owed), yet on resuming it runs the
# first commands and not the last: MONITOR shows the SETs, extends and inspects of all 20 names and
# the releases of the first 17, never those of the last 3, whose keys stay until their ttl (on the
# minority master only: the name is not blocked).  Deterministic (3 of 20 in each of 8 runs, both
# engines).  Cause, shown with a raw socket on redis-server 7.0.15: a client that writes a
# pipeline of SETs to a stopped server and closes its socket gets only the first ~36 KB of it run
# once the server resumes (100 of 100 SETs of 101 bytes, 364 of 400, 364 of 1,600): the server
# reads and runs a chunk, its replies go to a closed socket (reset), and it frees the client with
# the rest unread.  The same pipeline followed by shutdown(SHUT_WR), the socket kept open, is run
# whole (1,600 of 1,600, 6,400 of 6,400).  It showed when the key layout made every command some
# bytes longer (the name's hash tag in its internal keys, a release's channel as an argument).
# Fixed: an engine closed while a master owes it replies (every byte of its commands written)
# hands a copy of that connection to _engines/drain.py, which half-closes it and keeps it open
# (no thread: let go by a later hand-over once the server is done, or after 60 s).  Pinned by
# tests/faults/test_stopped_master.py::test_resumed_master_keeps_no_key_of_concurrent_tasks.
B8 = "library bug B8 (fixed): releases queued behind a stopped master lost when the client closed"
