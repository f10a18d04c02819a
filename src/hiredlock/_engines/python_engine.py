"""The pure-Python engine: the engine contract (see _engines/contract.py) on its own sockets and
RESP2, in parts named as the native engine's: master.py (a master's connection and what it owes),
round.py (one round, and the blocking driver run_blocking), and here the engine, which starts
rounds and keeps the connections between them. The per-master rules come from
_engines/master_policy.py.

A master is marked busy from the start of a round until its accounting at the end; one still
marked when the next round starts (or at close) was in a round that an exception ended (a
KeyboardInterrupt, a signal handler's exception): what it still owes is unknown, so its
connection is dropped, never read as if in step.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Optional

from .._core.fork import generation as _fork_generation
from .._core.masters import MasterSpec
from .._core.requests import RoundRequest, SetNx
from .._core.scripts import BATCHED, CONNECT_TIMEOUT_MIN_MS, SCRIPT_BATCH_ITEMS
from .._core.scripts import quorum as _quorum_of
from . import link as _link
from . import resolver as _resolver
from .connect import (
    CONNECT_TIMED_OUT,
    LOCAL_ERRNOS,
    TLS_HANDSHAKE_TIMED_OUT,
    direct_address,
    local_error,
)
from .contract import RoundResult
from .link import CONNECTING, READY, Broken, os_error_text
from .master import (
    CONN_ERROR,
    HUNG_UP,
    KIND_SCRIPT,
    KIND_SET,
    LOGIN,
    POLLRDHUP,
    Master,
)
from .master_policy import MasterPolicy
from .poller import POLLIN, new_poller
from .resp import NOT_READY, ProtocolError, ReplyError, pack_command, pack_set_nx_px
from .round import Round, run_blocking
from .script_commands import Evals, batch_rows
from .votes import Votes

_CONNECT_MIN_NS = int(CONNECT_TIMEOUT_MIN_MS * 1_000_000)


class PythonEngine:
    """Engine contract on plain non-blocking sockets, one connection per master.

    A round request (see hiredlock._core.requests) runs in one call, run(request), or in steps
    for a driver of one's own: begin(request) starts it (commands written, connections opening),
    the driver feeds it events (see Round), finish(round) gives the results.
    """

    name = "python"

    def __init__(
        self, masters: Sequence[MasterSpec], quorum: Optional[int] = None, router: Any = None
    ) -> None:
        # router: a routing table (_engines/routing.py's Table) when a master is a Redis
        # Cluster: the engine's connections are then its links, and votes count its places
        self.router = router
        if router is None:
            self._masters = [Master(index, spec) for index, spec in enumerate(masters)]
            self._places = len(self._masters)
        else:
            self._masters = [Master(index, spec) for index, spec in enumerate(router.links)]
            self._places = router.n_places
            for master, column in zip(self._masters, router.columns):
                master.column = column
        self._quorum = quorum if quorum is not None else _quorum_of(self._places)
        self._policy = MasterPolicy([master.place for master in self._masters], router)
        self._generation = _fork_generation[0]
        _resolver.prefetch([master.place for master in self._masters if master.place is not None])

    def run(self, request: RoundRequest) -> list[RoundResult]:
        """Runs a round request (SetNx, RunScript or Cleanup) and gives its results."""
        return run_blocking(self.begin(request))

    def begin(self, request: RoundRequest) -> Round:
        """Starts a round request's round; a driver waits for it, finish() gives its results."""
        if type(request) is SetNx:
            keys, tokens = request.keys, request.tokens
            if len(keys) != len(tokens):
                raise ValueError("SetNx needs one token per key")
            ttl = b"%d" % int(request.ttl_ms)
            commands = [pack_set_nx_px(key, token, ttl) for key, token in zip(keys, tokens)]
            return self._begin(
                KIND_SET, commands, None, None, request.timeout_ms, False, True, False, keys
            )
        argvs = request.argvs
        count = b"%d" % request.numkeys
        own = Evals(request.source, count, argvs, request.acquires)
        batched = None
        if self.router is None and request.numkeys > 0 and len(argvs) > 1:
            batched = BATCHED.get(request.sha)
        if batched is None:
            commands = [pack_command((b"EVALSHA", request.sha, count, *argv)) for argv in argvs]
            evals, sha, item_evals = own, request.sha, None
        else:
            # (contract: run) a few commands of the batching script, up to SCRIPT_BATCH_ITEMS
            # names each; each name's own EVAL for a master that takes no batch
            rows = batch_rows(request.numkeys, argvs)
            commands = [pack_command((b"EVALSHA", batched.sha, *row)) for row in rows]
            evals = Evals(batched.source, None, rows, request.acquires)
            sha, item_evals = batched.sha, own
        return self._begin(
            KIND_SCRIPT,
            commands,
            evals,
            sha,
            request.timeout_ms,
            request.wait_all,
            request.honour_backoff,
            request.want_values,
            None if self.router is None else [argv[0] for argv in argvs],
            item_evals,
        )

    def finish(self, rnd: Round) -> list[RoundResult]:
        """The results of a round a driver is done with (accounting it first if need be)."""
        rnd.end()
        return rnd.votes.results(rnd.ended_ns)

    def owes_replies(self) -> bool:
        """True when a master still owes replies to a round that ended, or has bytes of one not
        written yet: commands of that round may still run there, after this moment."""
        for master in self._masters:  # noqa: SIM110 (a loop: any() and a generator cost more here)
            if master.owed or master.unsent is not None:
                return True
        return False

    def owed_fds(self) -> list[int]:
        """(contract: Engine.owed_fds)"""
        if self._generation != _fork_generation[0]:
            return []
        return [
            master.fd
            for master in self._masters
            if master.owed and master.sock is not None and master.unsent is None
        ]

    def closes(self) -> int:
        """(contract: Engine.closes)"""
        return _link.closed_count

    def close(self) -> None:
        """Closes every connection (in a forked child too: closing sends nothing, see drop)."""
        for master in self._masters:
            master.drop()
            master.busy = False

    # -- one round ---------------------------------------------------------------------------

    def _begin(
        self,
        kind: int,
        commands: list[bytes],
        evals: Optional[Evals],
        sha: Optional[bytes],
        timeout_ms: float,
        wait_all: bool,
        honour_backoff: bool,
        want_values: bool,
        keys: Optional[Sequence[bytes]] = None,
        item_evals: Optional[Evals] = None,
    ) -> Round:
        """item_evals: when the commands are a batched script's, each name's own script as EVAL
        (for a master that takes no batch: see Master.unbatched)."""
        if not commands:  # nothing to do: a round with no masters, finished already
            now = time.monotonic_ns()
            votes = Votes(0, self._places, self._quorum, now, want_values)
            return Round((), None, kind, commands, evals, sha, votes, now, now, False, False)
        if self._generation != _fork_generation[0]:  # (a list read: cheaper than a call)
            self.close()  # the parent's sockets: closed here, never used
            self._generation = _fork_generation[0]
        masters = self._masters
        router = self.router
        if router is not None:  # (_engines/routing.py: assign)
            for master, carries in zip(masters, router.assign(keys)):
                master.carries = None if carries is None else list(carries)
        for master in masters:
            if master.busy:
                master.drop()  # an exception ended its last round before the accounting
            master.busy = master.carries is None or bool(master.carries)
        t0 = time.monotonic_ns()
        timeout_ns = int(timeout_ms * 1_000_000)
        n_keys = len(commands) if item_evals is None else len(item_evals.argvs)
        votes = Votes(n_keys, self._places, self._quorum, t0, want_values)
        rnd = Round(
            masters,
            self._policy,
            kind,
            commands,
            evals,
            sha,
            votes,
            t0 + timeout_ns,
            t0 + max(timeout_ns, _CONNECT_MIN_NS),
            wait_all,
            wait_all and honour_backoff,
        )
        rnd.router = router
        if item_evals is not None:
            rnd.unit = SCRIPT_BATCH_ITEMS
            rnd.item_evals = item_evals
        try:
            self._refresh(rnd)
            self._start(rnd, t0, honour_backoff)
        except BaseException:
            rnd.break_off()
            raise
        return rnd

    def _refresh(self, rnd: Round) -> None:
        """Reads, without waiting, what idle connections received since the last round.

        Late replies to earlier rounds are dealt with here, so a master that was merely slower
        than the quorum is waited for again; a connection the master closed meanwhile (a restart)
        is replaced in this round instead of failing it.
        """
        idle = {master.fd: master for master in self._masters if master.sock is not None}
        if not idle:
            return
        lagging = self._policy.lagging
        poller = new_poller()
        for fd, master in idle.items():
            if master.state == CONNECTING:
                poller.register(fd, master.events_wanted())
            else:
                poller.register(fd, POLLIN | POLLRDHUP)
        for fd, events in poller.poll(0):
            master = idle[fd]
            if master.state == CONNECTING:
                # A connect that went on after its round: confirmed now (a TLS master's
                # handshake a step further; the login goes with this round's commands), or, if
                # the master went away meanwhile, started afresh in this round.
                if events & HUNG_UP or not self._step_connect(master):
                    master.drop()
                elif master.state == READY:
                    rnd.up |= master.bit
            elif not self._catch_up(master) or events & HUNG_UP:
                master.drop()
            elif not master.owed and lagging & master.bit:
                rnd.caught_up |= master.bit  # (master_policy: lagging)

    @staticmethod
    def _step_connect(master: Master) -> bool:
        """Between rounds, what Round._connected does in one: confirms a connect, or takes a TLS
        handshake a step further; False when the connection cannot be used (why does not matter
        here: the round that follows connects afresh and tells)."""
        try:
            if master.connected():
                master.state = READY
        except Broken:
            return False
        return True

    @staticmethod
    def _catch_up(master: Master) -> bool:
        """Reads the replies an idle connection received; False when it cannot be used."""
        reader = master.reader
        owed = master.owed
        while True:
            try:
                data = master.receive()
            except Broken:
                return False  # (closed by the master, say)
            if not data:
                return True
            reader.feed(data)
            while True:
                try:
                    reply = reader.get()
                except ProtocolError:
                    return False
                if reply is NOT_READY:
                    break
                master.heard = True
                if not owed:
                    return False  # a reply nobody asked for: never guess what it answers
                entry = owed.popleft()
                if entry is LOGIN:
                    if type(reply) is ReplyError:
                        return False  # the next connect reports it
                elif (
                    entry is not None
                    and type(reply) is ReplyError
                    and reply.text.startswith("NOSCRIPT")
                ):
                    try:
                        master.push(entry)
                    except Broken:
                        return False
                    owed.append(None)

    def _start(self, rnd: Round, t0: int, honour_backoff: bool) -> None:
        """Writes the round's commands to every connected master, then opens the connections
        that are missing."""
        policy = self._policy
        if t0 >= policy.next_follow:
            self._follow_sentinels(t0)
        lagging = policy.lagging & ~rnd.caught_up
        rnd.lagging = lagging
        skip = policy.skipped(t0, rnd.kind == KIND_SET) if honour_backoff and policy.down else 0
        to_open = []
        for master in self._masters:
            master.fresh = False
            master.waited = not lagging & master.bit
            master.todo = 0
            if not master.busy:
                if not master.warm or master.sock is not None:
                    continue  # (a cluster's node that carries no key of this round)
                master.warm = False  # (a redirect named it: connected now, for the next ones)
                master.busy = True
            if master.sock is not None:
                master.deadline = rnd.deadline
                if master.state != CONNECTING:
                    if master.unqueued:
                        # connected since the last round: its login and first commands go now,
                        # with the connect bound
                        master.fresh = True
                        master.deadline = rnd.fresh_deadline
                    rnd.queue(master)
                elif t0 < master.connect_deadline:
                    # still connecting since an earlier round: its commands go once it is up,
                    # and once the outcome is decided it is not waited for
                    master.waited = False
                    rnd.watch(master)
                else:
                    # (a TLS master has its channel once the TCP connect is confirmed)
                    why = CONNECT_TIMED_OUT if master.channel is None else TLS_HANDSHAKE_TIMED_OUT
                    rnd.fail(master, CONN_ERROR, why, unreached=True)
            elif skip & master.bit:  # (master_policy: honour_backoff)
                rnd.votes.vote_all(
                    master.column, CONN_ERROR, policy.last_error[master.index], master.carries
                )
            else:
                to_open.append(master)
        if not to_open:
            return
        # Unix sockets and numeric addresses connect at once; host names wait (once per name,
        # at most what is left of the round) for the resolver's first answer, in one call.
        named = []
        for master in to_open:
            spec = master.spec
            if spec.path is not None:
                self._open(master, rnd, None)
            elif master.place is not None:
                named.append(master)
            else:
                self._open(master, rnd, direct_address(spec))
        if named:
            wait_s = max(0, rnd.deadline - time.monotonic_ns()) / 1e9
            places = [master.place for master in named]
            for master, address in zip(named, _resolver.lookup_many(places, wait_s)):
                if isinstance(address, str):  # no address: the resolver says why
                    rnd.fail(master, CONN_ERROR, address, unreached=True)
                else:
                    self._open(master, rnd, address)

    def _follow_sentinels(self, now: int) -> None:
        """Drops the connections the policy says go before this round (master_policy:
        failover): this round connects to the master the sentinels name now."""
        masters = self._masters
        addresses = [master.address if master.sock is not None else None for master in masters]
        drop = self._policy.follow(now, addresses)
        if drop:
            for master in self._masters:
                if drop & master.bit:
                    master.drop()

    def _open(self, master: Master, rnd: Round, address: Any) -> None:
        """Starts a master's new connection; its login and the commands go once it is up."""
        try:
            master.open(address)
        except OSError as exc:
            if exc.errno in LOCAL_ERRNOS:
                # this process's failure (out of descriptors...): no backoff (see
                # _engines/connect.py)
                rnd.votes.vote_all(
                    master.column, CONN_ERROR, local_error(os_error_text(exc)), master.carries
                )
                return
            rnd.fail(master, CONN_ERROR, os_error_text(exc), unreached=True)
            return
        if rnd.lagging & master.bit:
            rnd.caught_up |= master.bit  # a new connection owes nothing (master_policy: lagging)
        master.fresh = True
        master.waited = True
        master.deadline = master.connect_deadline = rnd.fresh_deadline
        if master.state == READY:
            rnd.queue(master)
        else:
            rnd.watch(master)
