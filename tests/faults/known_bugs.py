"""Library bugs found by the fault tests, not fixed here (src/ is not ours): a test whose liveness
check fails in a way one of these explains xfails with its text; its safety checks still apply."""

from __future__ import annotations

# B1 (FIXED upstream in bfba2ba, "lagging only set"): the python engine's _abandon() cleared a
# master's `lagging` flag after a round decided early, so a frozen or slow minority cost every
# release, extend and fence raise a full master_timeout (native: only the first).  Pinned by
# tests/test_fault_regressions.py::test_frozen_minority_costs_release_one_timeout.
B1 = "library bug B1 (fixed in bfba2ba)"


def liveness_bug(engine: str, fault_kind: str) -> tuple[str, set] | None:
    """The open known bug that explains a liveness shortfall of a minority scenario, with the
    kinds of shortfall it explains (none open now: B1, the python engine's, is fixed)."""
    return None


# B2: release and the unlock after a failed attempt are sent as EVALSHA; a master that does not
# have the script answers NOSCRIPT and the engine then sends EVAL (_engine_py._read /
# _late_reply, the native engine's Redo list).  When that reply is lost (the connection dies
# before it arrives: drop_replies), the EVAL is never sent, so the master keeps the key until
# its ttl, although the request reached it.  This breaks README's "no stray keys: a failed
# attempt unlocks every master, also those that did not answer" whenever the master's script
# cache is empty (after a restart or SCRIPT FLUSH), on both engines.  A fix: send the script
# itself (EVAL, or SCRIPT LOAD pipelined before EVALSHA) on a connection that has not yet seen
# the script succeed.  Evidence: tests/test_fault_lost_replies.py::*[*-flushed] (strict xfail).
# The same mechanism, without any lost reply: when the NOSCRIPT reply merely arrives after the
# unlock round's timeout (a slow master, or a loaded client), the EVAL is sent only by a *later*
# round on that engine; a client that makes no further round leaves the key until its ttl.
# Evidence: tests/test_fault_regressions.py::test_unlock_with_a_late_noscript (strict xfail);
# seen under CPU load in test_fault_error_replies.py::test_wrongtype_fence_counter.
B2 = (
    "known library bug B2 (a lost NOSCRIPT reply means the EVAL fallback is never sent: release "
    "and the unlock after a failed attempt do not run on a master whose script cache is empty)"
)

# B3 (FIXED upstream in e5f0a8d): the python engine reported -LOADING as CONN_ERROR without
# its code (redis-py's BusyLoadingError is a ConnectionError) and dropped the "ERR" code of
# generic error replies; the native engine reported ERROR with the server's text.  Pinned by
# tests/test_fault_error_replies.py::test_loading and
# tests/test_fault_regressions.py::test_generic_error_keeps_its_code.
B3 = "library bug B3 (fixed in e5f0a8d)"


# B4: native engine.  README / _engine_py: "a connection the master closed meanwhile (a restart)
# is replaced in this round instead of failing it".  Two of three masters killed and new servers
# started on their ports while two locks are held, the third master holding the name (so both
# restarted masters are needed): the native engine's next acquire votes CONN_ERROR "Server closed
# the connection" for one of them and fails, in about 10-20% of runs (python engine: 0 of 40).
# bfba2ba fixed the case of a connection still connecting from an earlier round; this one
# remains on HEAD bfba2ba.  A liveness defect (a failed vote right after a restart).
# Evidence: tests/test_fault_regressions.py::test_restarted_masters_used_in_the_next_round.
# Worse, with 6a59a67 ("poll idle connections only": _refresh skips a connection whose last
# round ended less than IDLE_CHECK_NS = 1 ms ago): when masters close idle connections (CLIENT
# KILL, a restart, a proxy reset) and the next round follows within ~1 ms, that round writes on
# the dead connections and votes CONN_ERROR: CLIENT KILL on 2 of 3 masters right after an
# acquire, then extend() -> LockLost in 19 of 20 runs although all 3 masters still hold the key
# (python engine: 0 of 20; with 5 ms between: 0 of 20).  A false LockLost.
# Evidence: tests/test_fault_regressions.py::test_connections_closed_by_the_server_are_replaced.
B4 = (
    "known library bug B4 (native engine: a connection the master closed (restart, CLIENT KILL) "
    "is not always replaced in the next round, which votes CONN_ERROR 'Server closed the "
    "connection'; within 1 ms of the previous round almost always)"
)
