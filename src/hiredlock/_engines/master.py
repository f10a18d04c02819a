"""The pure-Python engine's masters: one connection per master and what it still owes us (the
native engine's part of the same name: _native/master.pxi).

Every reply a connection owes is accounted for, in order (_Master.owed): the login's first, then
those owed to abandoned rounds (read and dropped by later rounds), then this round's. What a
master's failures mean for later rounds (backoff, lagging, READONLY, Sentinel groups) is not
here: see _engines/master_policy.py.
"""

from __future__ import annotations

import select
from collections import deque
from typing import Any, Optional

from .._core.masters import MasterSpec
from .._core.scripts import Outcome
from .link import READY, Link

OK = int(Outcome.OK)
TAKEN = int(Outcome.TAKEN)
TIMEOUT = int(Outcome.TIMEOUT)
CONN_ERROR = int(Outcome.CONN_ERROR)
ERROR = int(Outcome.ERROR)
SKIPPED = int(Outcome.SKIPPED)
PENDING = 255

KIND_SET = 0
KIND_SCRIPT = 1

# What each reply a connection owes answers (_Master.owed): an int k is item k of the current
# round; LOGIN the reply to AUTH or SELECT; None a reply owed to an abandoned round, dropped when
# read; bytes too, but if that reply says NOSCRIPT those bytes (the script's EVAL) are sent then,
# so that a master that answered late still runs the release or extend it was sent.
LOGIN = "login"
# (ASKING, k) the reply to the ASKING that goes before item k's command, sent to a cluster node
# after an ASK reply (see _engines/routing.py): an error there is item k's vote.
ASKING = "asking"
ASKING_COMMAND = b"*1\r\n$6\r\nASKING\r\n"
REDIRECTS = ("MOVED ", "ASK ")  # the error replies of a cluster node that has not the key's slot

# A connection the master closed shows as one of these in the idle check before a round.
POLLRDHUP = getattr(select, "POLLRDHUP", 0)
HUNG_UP = (
    POLLRDHUP
    | getattr(select, "POLLHUP", 0)
    | getattr(select, "POLLERR", 0)
    | getattr(select, "POLLNVAL", 0)
)


class Master(Link):
    """One master's connection (its steps: _engines/link.py) and what it still owes us."""

    __slots__ = (
        "bit",
        "busy",
        "carries",
        "column",
        "connect_deadline",
        "deadline",
        "fd",
        "fresh",
        "index",
        "login_due",
        "owed",
        "scripts",
        "todo",
        "unbatched",
        "unqueued",
        "waited",
        "warm",
    )

    def __init__(self, index: int, spec: MasterSpec) -> None:
        super().__init__(spec)
        self.index = index
        self.bit = 1 << index  # its bit in the masks of _engines/master_policy.py
        self.column = index  # the place it votes for (see _engines/routing.py: a cluster's node)
        # the keys (indexes) it carries in this round: None, all (a link that is not routed)
        self.carries: Optional[list[int]] = None
        # a cluster's node that a redirect named while it had no connection: the next round
        # opens one, though it carries no key there (see _engines/routing.py)
        self.warm = False
        self.fd = -1
        self.owed: deque[Any] = deque()
        self.login_due = False
        # SHAs of the scripts sent on this connection as EVAL: the master has them cached before
        # any later command of the connection runs, so EVALSHA is safe for those (a NOSCRIPT, after
        # a SCRIPT FLUSH, is answered with the EVAL, in its round or late). Until then a script
        # goes as EVAL, the only form that cannot be refused. A master that stopped reading is
        # then sent the source once, not with every command queued for it.
        self.scripts: set[bytes] = set()
        self.busy = False  # in a round whose accounting has not run yet (see the module doc)
        self.todo = 0  # replies of the current round still owed
        self.fresh = False  # its connection opened or came up in (or just before) this round
        self.unqueued = False  # no round's commands queued on its connection yet
        # it refused a batched script's command with CROSSSLOT (a cluster-mode server given as a
        # master: the names of a batch may be in several slots): its names go one by one
        self.unbatched = False
        self.deadline = 0  # when the current round stops waiting for it
        self.connect_deadline = 0  # a connect still pending then has failed (see _Round.end)
        self.waited = True  # rounds that wait for all wait for it (see master_policy: lagging)

    def open(self, address: Any) -> None:
        """Starts a non-blocking connect (a unix socket path, or a resolved Address)."""
        connected = self.start(address)
        self.fd = self.sock.fileno()  # type: ignore[union-attr]
        # (a TLS connection is not ready before its handshake: _Round._connected runs it)
        if connected and self.spec.tls is None:
            self.state = READY
        self.owed = deque()
        self.scripts = set()
        self.login_due = self.n_login > 0
        self.unqueued = True

    def drop(self) -> None:
        """Closes the connection (see Link.close) and forgets what it owed."""
        self.close()
        self.fd = -1
        self.owed = deque()
        self.scripts = set()
        self.todo = 0
