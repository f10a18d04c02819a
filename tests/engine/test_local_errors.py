"""Running out of file descriptors is this process's failure, not the masters': every master's
vote says so (a local error), and no master is put in reconnect backoff for it, so the very next
acquire, once descriptors are free again, tries and reaches every master.

The test process's soft RLIMIT_NOFILE is lowered to its lowest free descriptor number for the
failing acquire only (no new descriptor can be made then), and restored at once."""

from __future__ import annotations

import contextlib
import os
import resource

from apis import make_redlock_fixture, pytest_generate_tests  # noqa: F401  (both APIs)
from support import attempt, urls

from hiredlock import Outcome, QuorumUnreachable

TTL = 10.0


@contextlib.contextmanager
def no_free_descriptors():
    """While inside, opening any file or socket fails with EMFILE."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    lowest_free = os.open(os.devnull, os.O_RDONLY)
    os.close(lowest_free)
    resource.setrlimit(resource.RLIMIT_NOFILE, (lowest_free, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_out_of_descriptors_is_a_local_error_and_starts_no_backoff(make_redlock, masters5, key):
    rl = make_redlock(urls(masters5))
    with no_free_descriptors():
        failed = attempt(rl.lock(key, TTL), blocking=False)
    lock = rl.lock(key + ":after", TTL)
    acquired = attempt(lock, blocking=False)  # at once: within any backoff the failure started

    assert acquired is True, acquired
    assert {vote.outcome for vote in lock.last_votes} <= {Outcome.OK, Outcome.SKIPPED}, (
        lock.last_votes
    )
    lock.release()
    assert isinstance(failed, QuorumUnreachable), failed
    for vote in failed.votes:
        assert vote.outcome == Outcome.CONN_ERROR, failed.votes
        assert "too many open files" in vote.detail.lower(), failed.votes
        assert vote.detail.startswith("local error"), failed.votes
