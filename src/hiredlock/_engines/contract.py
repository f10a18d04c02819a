"""The engine contract: what both engines (native and pure Python) do, and nothing more.

An engine owns one connection per master and does one round trip per call for a batch of keys. It
does no sleeping, no retries and no policy: the API layer does those, once, for both engines, and
the per-master rules (reconnect backoff, lagging masters, READONLY, Sentinel groups) live once in
_engines/master_policy.py, handed to each round. An engine is used by one thread at a time (the
API layer pools them). The whole surface both engines provide is the Protocols below (Engine, and
Round for a round fed by a driver's events); tests/engine/test_contract.py checks both engines
against them.

A round runs a request of hiredlock._core.requests (SetNx, RunScript, Cleanup): engine.run(request)
runs it to its end, engine.begin(request) starts it and hands out the Round for a driver to feed.
A round gives one RoundResult per key:
    codes:      bytes of length n_masters, codes[m] is an Outcome value for master m
    elapsed_ns: monotonic nanoseconds from just before the first write to the moment the key's
                outcome was decided (a quorum of OKs, or too many failures for one), or to the end
                of the round when it never was
    details:    None, or {master index: text} for error replies and connection failures
    values:     with want_values, the integer reply of each master (0 where there was none),
                else None

Stop rules, the same in both engines, as the steps named below (each engine has a method of that
name, and its comments point here rather than repeat this):
    wanted    what the round waits for on each socket now, and whether a master it waits for still
              owes it something (python: _Round.fds_wanted / the scan in _stop; native: _wanted)
    stop      the table below, before D and from D to C (python: _Round._stop; native: _stop)
    extend    at D: one more look without waiting (rule 1), then end or go on to C (python:
              _Round._extend; native: _extend)
    account   the end of a round (rules 3 to 5) (python: _Round._account; native: _account)
Terms:
    D         the round's deadline: its start + timeout_ms
    C         the connect bound: its start + max(timeout_ms, CONNECT_TIMEOUT_MIN_MS)
    new       a master whose connection opened in this round, or came up in it or since the last
              one (a connect kept from an earlier round): this round carries its login and first
              commands, which take longer than a round trip (a slow GIL or TLS handshake must not
              cost a healthy master its vote)
    owes      its connect is still pending, or it owes replies to this round's commands
    keeps up  not lagging (no earlier round timed out on it without it catching up since) and not
              still connecting since an earlier round; a new master keeps up
    best effort  the unlock after a failed attempt (wait_all with honour_backoff): nobody waits
              on its outcome

    the round waits for             before D                      from D to C (then it ends)
    a key undecided                 every master that owes        new masters that owe, while
                                    (lagging ones too: skipping   they (with the OKs so far)
                                    one that can change the       could still make a quorum of
                                    outcome is a false failure)   OKs for an undecided key
    all decided, wait_all           masters that owe and keep up  new masters that owe (so
                                                                  connect() and a release wait
                                                                  for a new connection up to C)
    all decided, not wait_all       nothing: it ends
    best effort, decided or not     masters that owe and keep up  nothing: it ends at D

    1. Past D, every reply that comes while the round goes on counts, from any master (a reply
       in hand is that master's answer; waiting for it costs nothing more). At D the round takes
       one more look without waiting: replies already there count.
    2. A master that owes the round nothing, with bytes still to write (the socket takes no
       more), is not waited for: the round's outcome needs nothing from it. Bytes not written
       when a round ends stay queued on the connection, in order (a command cut short is
       completed first), and later rounds write them; their replies are read and dropped.
    3. A connect still pending when a round ends is kept, not closed: a later round (or the look
       before it) uses it once it completes, without opening another. It keeps the bound C of
       the round that opened it; a round that starts or ends past it gives the master
       CONN_ERROR / a timeout "connect timed out" and the reconnect backoff.
    4. A master still owing replies when a round ends is lagging if the round ended at or past
       its own bound (D, or C for a new master), not when the round ended early, decided.
    5. Masters still pending at the end vote SKIPPED on a decided key, TIMEOUT on another.

Replies that arrive after a round ended are read and thrown away by a later round (they are never
taken for the answer to a later command), or the connection is dropped. That holds whatever ends a
round: an exception raised in the middle of one (KeyboardInterrupt, a signal handler's exception)
leaves every reply still owed accounted for, or the connection closed, before it propagates.

Host names are never resolved inside a round (see _engines/resolver.py): a master whose name has no
address yet votes CONN_ERROR with the reason.

Routing (a client with a Redis Cluster among its masters; see _engines/routing.py): the engine is
made with `router`, a routing table. Its connections are then the table's `links` (a standalone
master is one link, a cluster one per primary), and every vote, stop rule and quorum above counts
the table's places (`columns[i]`: the place of link i; codes, details and values are indexed by
place; a redirected key's vote moves with it to the link it was sent to):
    assign    once per round, `router.assign(keys)` (a script's key: its argv[0]) gives each link
              the keys it carries: None all of them, () none (the link takes no part in the
              round: nothing written, not opened, not waited for), else their indexes; a link
              writes only its keys' commands, in that order, and its failure votes only them
    redirect  a MOVED or ASK reply to a key's command: `router.redirect(link, text)` names the
              link to send it to (and whether ASKING goes first); when that link is connected
              and logged in and the key was sent elsewhere fewer than MAX_REDIRECTS times in
              this round, the command goes there ([ASKING] then the command, EVAL where that
              link has not run the script), which owes the reply and is waited for as any link
              of the round; an error reply to ASKING is the key's vote. Else the reply is the
              key's vote (ERROR, with its text), and a link with no connection is opened by the
              next round (it carries nothing there: the attempts after it follow the redirect).
              A MOVED or ASK reply that comes after its round is dropped.
    version   an engine made on a table that became `stale` is closed and replaced by its owner
              (pool.py, aio/_rounds.py), never patched
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable, NamedTuple, Optional, Protocol

from .._core.masters import MasterSpec
from .._core.requests import RoundRequest


class RoundResult(NamedTuple):
    """One key's outcome in a round (see the module doc). The native engine builds plain tuples
    of these fields, in this order (a NamedTuple would cost it a Python call per key): callers
    unpack them or index them, and never test their type."""

    codes: bytes
    elapsed_ns: int
    details: Optional[dict[int, str]]
    values: Optional[tuple[int, ...]]


class Round(Protocol):
    """A round begun by Engine.begin, fed by a driver (the asyncio one: aio/_driver.py):

    fds_wanted()              fd -> POLLIN | POLLOUT: what the round waits for on each socket
    on_ready(fd, r, w)        that socket is readable (r) and/or writable (w)
    next_deadline_ns          when (time.monotonic_ns) on_deadline is due
    on_deadline(now_ns)       a deadline passed (the step `extend`)
    finished()                nothing more to wait for (the step `stop`): the driver then
                              calls end()
    end()                     the accounting (the step `account`, once); also how a driver
                              gives up on a round early (a cancelled task); the engine's
                              finish(round) then gives the results
    break_off()               instead of end() after an exception in the middle of an event:
                              what the masters owe is unknown, so their connections go
    before_close              None, or called with an fd just before the round closes that
                              socket, so a driver can unregister it from its own event loop
                              first (fd numbers are reused)
    """

    before_close: Optional[Callable[[int], None]]

    @property
    def next_deadline_ns(self) -> int: ...

    def fds_wanted(self) -> dict[int, int]: ...

    def on_ready(self, fd: int, readable: object, writable: object) -> None: ...

    def on_deadline(self, now_ns: int) -> None: ...

    def finished(self) -> bool: ...

    def end(self) -> None: ...

    def break_off(self) -> None: ...


class Engine(Protocol):
    name: str

    def __init__(
        self, masters: Sequence[MasterSpec], quorum: Optional[int] = None, router: Any = None
    ) -> None: ...

    def run(self, request: RoundRequest) -> list[RoundResult]:
        """Runs a round request to its end (the sync driver: polls with the engine's own loop).

        SetNx: SET key token NX PX ttl_ms on every master: OK if set, TAKEN if the key exists.
        RunScript (and Cleanup): EVALSHA sha numkeys *argv for each argv; EVAL source after
        NOSCRIPT, and on a connection that has not run this script yet (so that no lost NOSCRIPT
        reply can leave the script unrun); a reply that comes after the round ended gets its EVAL
        too when it says NOSCRIPT, unless the request acquires (see Script.acquires); OK on an
        integer reply > 0, TAKEN on 0 or nil; every argv has the same length. A script of
        hiredlock._core.scripts.BATCHED with numkeys >= 1, for two argvs or more, on a master
        that is not a cluster place, goes as that batching script instead: one command for each
        SCRIPT_BATCH_ITEMS argvs (EVALSHA and EVAL as above, with the batching script's sha and
        source), whose array reply gives each argv the vote its own reply would (an error in
        it is that argv's ERROR vote; an error reply to the command is the vote of each of its
        argvs). honour_backoff: a
        best-effort round (an acquire, or the unlock after a failed attempt): like SetNx, do not
        reconnect to masters that failed a moment ago; with wait_all, do not wait for lagging
        masters even while undecided. Release and extend rounds always try, and wait for, every
        master their outcome needs.
        """
        ...

    def begin(self, request: RoundRequest) -> Round:
        """Starts a round request's round (commands queued and written as far as the sockets
        take them; host names looked up first, bounded by the round's timeout) and hands it out
        for a driver to feed; finish(round) gives its results."""
        ...

    def finish(self, rnd: Round) -> list[RoundResult]:
        """The results of a round a driver is done with (ended first if need be)."""
        ...

    def owes_replies(self) -> bool:
        """True when commands of a round that ended may still run on a master after this moment
        (replies still owed, or bytes not written yet). A later command on the same keys must
        then go out on this engine's connections, behind them: two connections to one master
        are served in no promised order (a release could overtake its SET)."""
        ...

    def owed_fds(self) -> list[int]:
        """The descriptors of the connections whose master still owes replies, with every
        byte of their commands written (none in a forked child): the owner hands them to
        _engines/drain.py before close()."""
        ...

    def closes(self) -> int:
        """A count of the connections the engines of this kind closed in this process, only
        ever growing: a driver that keeps sockets registered between rounds (aio/_driver.py)
        re-registers them when it changed, since a descriptor closed without a round's
        before_close (in begin(), at the end of a round) can come back as another socket."""
        ...

    def close(self) -> None: ...
