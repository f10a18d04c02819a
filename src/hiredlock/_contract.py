"""The engine contract: what both engines (native and pure Python) do, and nothing more.

An engine owns one connection per master and does one round trip per call for a batch of keys. It
does no sleeping, no retries and no policy: the API layer does those, once, for both engines. An
engine is used by one thread at a time (the API layer pools them).

A call returns one RoundResult per key:
    codes:      bytes of length n_masters, codes[m] is an Outcome value for master m
    elapsed_ns: monotonic nanoseconds from just before the first write to the moment the key's
                outcome was decided (a quorum of OKs, or too many failures for one), or to the end
                of the round when it never was
    details:    None, or {master index: text} for error replies and connection failures
    values:     with want_values, the integer reply of each master (0 where there was none),
                else None

Stop rules: with wait_all False the round ends once every key is decided. With wait_all True it
also waits, once every key is decided, for every master that is keeping up to answer every command;
masters that still owed replies to an earlier round (they were slow then), or whose connection was
still opening since an earlier round, get the commands but are not waited for once the outcome is
decided: one stopped master does not cost every release its full timeout. While a key is undecided,
every master that may still answer is waited for (lagging ones included): skipping a master whose
answer can change the outcome would be a false failure. The exception is the unlock after a failed
attempt (wait_all with honour_backoff): nobody waits on its outcome, so it waits for the masters
keeping up only, decided or not, and a stopped majority does not cost every failed attempt a second
timeout. Either way a master is waited for at most
timeout_ms, or, when its connection opens in this round, at most max(timeout_ms,
CONNECT_TIMEOUT_MIN_MS) from the round's start: a wait_all round decided at its deadline goes on
for those (connect() waits for each master up to the connect allowance so).

Replies that arrive after a round ended are read and thrown away by a later round (they are never
taken for the answer to a later command), or the connection is dropped. That holds whatever ends a
round: an exception raised in the middle of one (KeyboardInterrupt, a signal handler's exception)
leaves every reply still owed accounted for, or the connection closed, before it propagates.

Host names are never resolved inside a round (see _resolver.py): a master whose name has no
address yet votes CONN_ERROR with the reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional, Protocol

from ._config import MasterSpec

RoundResult = tuple[bytes, int, Optional[dict[int, str]], Optional[tuple[int, ...]]]


class Engine(Protocol):
    name: str

    def __init__(self, masters: Sequence[MasterSpec], quorum: int) -> None: ...

    def set_nx(
        self,
        keys: Sequence[bytes],
        tokens: Sequence[bytes],
        ttl_ms: int,
        timeout_ms: float,
    ) -> list[RoundResult]:
        """SET key token NX PX ttl_ms on every master: OK if set, TAKEN if the key exists."""
        ...

    def run_script(
        self,
        sha: bytes,
        source: bytes,
        numkeys: int,
        argvs: Sequence[tuple[bytes, ...]],
        timeout_ms: float,
        wait_all: bool,
        want_values: bool = False,
        honour_backoff: bool = False,
    ) -> list[RoundResult]:
        """EVALSHA sha numkeys *argv for each argv; EVAL source after NOSCRIPT, and on a
        connection that has not run this script yet (so that no lost NOSCRIPT reply can leave the
        script unrun).

        honour_backoff: a best-effort round (an acquire, or the unlock after a failed attempt):
        like set_nx, do not reconnect to masters that failed a moment ago; with wait_all, do not
        wait for lagging masters even while undecided. Release and extend rounds always try, and
        wait for, every master their outcome needs.

        OK on an integer reply > 0, TAKEN on 0 or nil; every argv has the same length.
        """
        ...

    def owes_replies(self) -> bool:
        """True when commands of a round that ended may still run on a master after this moment
        (replies still owed, or bytes not written yet). A later command on the same keys must
        then go out on this engine's connections, behind them: two connections to one master
        are served in no promised order (a release could overtake its SET)."""
        ...

    def close(self) -> None: ...
