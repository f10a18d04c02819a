"""Release notices: waiters woken when the lock they wait for is released, instead of a timer.

Every release (and the unlock after a failed attempt, when it deleted our key) publishes on the
name's channel (NameKeys.channel, see _core/keys.py). A client that has waiters keeps one
subscriber connection per master, shared by all of them: a channel is subscribed while a waiter
waits on it (and LINGER_S after the last one left, so that a lock loop does not subscribe anew on
every wait), and any one master's notice wakes every waiter of that name in this client, which
then tries again. A notice is only a hint: the attempt it triggers is judged over a quorum like
any other, so a false or late notice costs one attempt, never a false acquire.

A lost notice (a master down, a subscription not confirmed yet, a dropped connection) falls back
to the waiter's timer (the randomised retry_delay), so it never blocks a waiter for long. The
first confirmation of a new channel wakes its waiters too: a release that came between their
failed attempt and the subscription would otherwise be missed.

NoticeBoard is the state, without I/O of its own: the subscribers (non-blocking connections,
TLS and login included) and the waiters per channel. ThreadNotices drives it from a thread for
the blocking API (started by the first wait, ended when nothing was waited for during LINGER_S,
or by close()); hiredlock.aio's LoopNotices drives it from the event loop, with one timer set for
the next thing due (NoticeBoard.next_due), so that a waiting process is idle (and it closes the
connections as soon as no channel is left).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Callable, Optional

from .._core.fork import generation as _fork_generation
from .._core.masters import MasterSpec
from .._core.requests import channels_of, heard_on
from . import resolver as _resolver
from .connect import direct_address
from .link import CONNECTING, READY, Link
from .master_policy import Backoff
from .poller import POLLIN, POLLOUT, new_poller
from .resp import NOT_READY, ProtocolError, ReplyError, leading_notices, pack_command
from .routing import RoutedEngines
from .tls import TLSError

if TYPE_CHECKING:
    from .._core.session import Session

# A channel stays subscribed this long after its last waiter left; the thread (and the
# connections) end when no channel is left: LINGER_S after the last wait.
LINGER_S = 2.0
# A subscriber that failed is reconnected after a pause, doubling from MIN to MAX (a Backoff of
# _engines/master_policy.py, in seconds).
RECONNECT_MIN_S = 0.1
RECONNECT_MAX_S = 2.0
# A master that refused the subscriber (an ACL without the channels, say) is asked again after
# this long.
REFUSED_RETRY_S = 30.0
# A connection (TLS handshake and login included) that is not up after this long is dropped.
CONNECT_TIMEOUT_S = 2.0
# How often the thread's driver looks at the subscribers and the channels when nothing happens,
# and how soon a subscriber whose master has no address yet looks again.
TICK_S = 0.1


# What a subscriber reads of the pushes it gets: a sharded channel's as a plain one's;
# b"sunsubscribe" also when the master ends a subscription itself (a cluster's slot moved away).
_KINDS = {
    b"message": b"message",
    b"smessage": b"message",
    b"subscribe": b"subscribe",
    b"ssubscribe": b"subscribe",
    b"sunsubscribe": b"sunsubscribe",
}
_MOVED = ("MOVED ", "ASK ")


class SubscriberRefused(ProtocolError):
    """The master answered the subscriber's login or SUBSCRIBE with an error."""


class Subscriber(Link):
    """One master's pub/sub connection (its steps: _engines/link.py): a non-blocking state
    machine a driver feeds with its socket's readiness. Raises OSError (Broken), TLSError or
    ProtocolError when the connection is unusable (the board drops it)."""

    __slots__ = ("_logins_owed", "_since", "asked", "backoff", "confirmed", "node", "sharded")

    def __init__(
        self, spec: MasterSpec, node: Optional[tuple[int, tuple[str, int]]] = None
    ) -> None:
        super().__init__(spec)
        # (a Redis Cluster's primary: its place and address; it takes the channels of its slots)
        self.node = node
        # SSUBSCRIBE, what the scripts' SPUBLISH reaches (Redis 7 and later); SUBSCRIBE once the
        # master said it does not know it (the scripts PUBLISH there: see _core/scripts.py)
        self.sharded = True
        self._logins_owed = 0
        self._since = 0.0
        self.asked: set[bytes] = set()  # channels SUBSCRIBE was sent for on this connection
        self.confirmed: set[bytes] = set()  # channels the master confirmed
        self.backoff = Backoff(RECONNECT_MIN_S, RECONNECT_MAX_S)

    def open(self, now: float) -> bool:
        """Starts connecting; False when the master has no address yet (looked up meanwhile)."""
        if self.place is None:
            address = direct_address(self.spec)
        else:
            found = _resolver.lookup_many([self.place], 0.0)[0]
            if isinstance(found, str):
                return False  # (no address yet: the lookup goes on in the background)
            address = found
        connected = self.start(address)
        self.asked = set()
        self.confirmed = set()
        self._since = now
        if connected:
            self._connected()
        return True

    def fileno(self) -> int:
        return self.sock.fileno() if self.sock is not None else -1

    def overdue(self, now: float) -> bool:
        return self.state == CONNECTING and now - self._since > CONNECT_TIMEOUT_S

    def next_due(self, now: float) -> Optional[float]:
        """When this subscriber needs the board with no event of its socket (channels being
        wanted): its reconnection, a connection not up in time; None: not before an event."""
        if self.sock is None:
            # (past its pause and still closed: its master's address is being looked up)
            until = self.backoff.until
            return until if until > now else now + TICK_S
        if self.state == CONNECTING:
            return self._since + CONNECT_TIMEOUT_S
        return None

    def on_writable(self) -> None:
        if self.state == CONNECTING:
            self._connected()
        else:
            self.flush()

    def on_readable(self) -> list[tuple[bytes, bytes]]:
        """The messages that arrived: (b"message" or b"subscribe", channel) pairs (a sharded
        channel's smessage and ssubscribe are given as these)."""
        if self.state == CONNECTING:
            self._connected()
            return []
        data = self.receive()
        if not data:
            return []
        out: list[tuple[bytes, bytes]] = []
        if not self._logins_owed and not self.reader.pending():
            channels, taken = leading_notices(data)
            if channels:
                out = [(b"message", channel) for channel in channels]
                if taken == len(data):
                    return out
                data = data[taken:]
        self.reader.feed(data)
        while True:
            reply = self.reader.get()
            if reply is NOT_READY:
                return out
            if type(reply) is ReplyError and not self._logins_owed:
                if self.sharded and "unknown command" in reply.text:
                    self.sharded = False  # (before Redis 7: SUBSCRIBE, asked again)
                    self.asked = set()
                    continue
                if reply.text.startswith(_MOVED):
                    # (a cluster's slot moved: asked again once the map says where)
                    self.asked -= self.confirmed
                    continue
            if type(reply) is ReplyError:
                raise SubscriberRefused(f"the master refused the subscriber: {reply.text}")
            if self._logins_owed:
                self._logins_owed -= 1
                continue
            if type(reply) is list and len(reply) == 3:
                kind = _KINDS.get(reply[0])
                if kind is None:
                    continue
                channel = reply[1]
                if kind == b"sunsubscribe":
                    # the master's own (its slot moved away): asked again where it went
                    self.asked.discard(channel)
                    self.confirmed.discard(channel)
                    continue
                out.append((kind, channel))
                if kind == b"subscribe":
                    self.confirmed.add(channel)
                    self.backoff.succeeded()

    def subscribe(self, channels: Sequence[bytes], unsubscribe: Sequence[bytes]) -> None:
        """Asks for these changes (on a connection that is up)."""
        data = b""
        if channels:
            if self.sharded:  # (one command each: a cluster's must name one slot's channels)
                data += b"".join(pack_command((b"SSUBSCRIBE", one)) for one in channels)
            else:
                data += pack_command((b"SUBSCRIBE", *channels))
            self.asked.update(channels)
        if unsubscribe:
            if self.sharded:
                data += b"".join(pack_command((b"SUNSUBSCRIBE", one)) for one in unsubscribe)
            else:
                data += pack_command((b"UNSUBSCRIBE", *unsubscribe))
            self.asked.difference_update(unsubscribe)
            self.confirmed.difference_update(unsubscribe)
        if data:
            self.push(data)

    def close(self) -> None:
        """Closes the connection (only close(): nothing is sent, as a forked child needs)."""
        super().close()
        self.asked = set()
        self.confirmed = set()

    def failed(self, now: float, pause_s: Optional[float] = None) -> None:
        """Closes the connection; the next one is opened after `pause_s`, or after a pause that
        doubles with each failure in a row."""
        self.close()
        self.backoff.failed(now, pause_s)

    def _connected(self) -> None:
        """A step of the connect (and a TLS master's handshake); once it is over, the login."""
        if not self.connected():
            return
        self.state = READY
        self._logins_owed = self.n_login
        if self.login:
            self.push(self.login)


class NoticeBoard:
    """The subscribers of one client and its waiters per channel; no I/O of its own (a driver
    calls service() now and then, and readable()/writable() when a subscriber's socket is).

    A waiter is any object with a `notify()` the driver can call; its driver guards the board
    with `mutex` when waiters come from other threads.
    """

    def __init__(self, masters: Sequence[MasterSpec], router: Any = None) -> None:
        self.masters = tuple(masters)
        # A Redis Cluster's subscribers are its primaries (one each, from the router's table of
        # links: see _engines/routing.py), each with the channels of its slots. `router` gives
        # the client's Router (made at the first need: its lookups are I/O).
        self.router: Optional[Callable[[], Any]] = router
        self._fixed = [Subscriber(spec) for spec in self.masters if spec.cluster is None]
        self._nodes: dict[tuple[int, tuple[str, int]], Subscriber] = {}
        self._table: Any = None
        self.subscribers = list(self._fixed)
        self.waiters: dict[bytes, set[Any]] = {}
        # channels subscribed with no waiter, since (in that order: each is added when its last
        # waiter leaves, at a time no earlier than the others')
        self.idle_since: dict[bytes, float] = {}
        # how many notices each subscribed channel had: a waiter compares it with what it had
        # heard before its attempt, so that a notice between the two is not missed
        self.heard: dict[bytes, int] = {}
        self.mutex = threading.Lock()
        self.generation = _fork_generation[0]
        # called with a subscriber whose socket is about to be closed (a driver that registered
        # it with an event loop unregisters it first)
        self.on_drop: Callable[[Subscriber], None] = _nothing

    def add(self, channel: bytes | tuple[bytes, ...], waiter: Any) -> bool:
        """Registers a waiter on a channel (or on each of a tuple's); True when one of them was
        not subscribed yet."""
        new = False
        for one in channels_of(channel):
            waiting = self.waiters.get(one)
            if waiting is None:
                self.waiters[one] = waiting = set()
            waiting.add(waiter)
            if self.idle_since.pop(one, None) is None and len(waiting) == 1:
                new = True
        return new

    def remove(self, channel: bytes | tuple[bytes, ...], waiter: Any, now: float) -> None:
        for one in channels_of(channel):
            waiting = self.waiters.get(one)
            if waiting is None:
                continue
            waiting.discard(waiter)
            if not waiting:
                del self.waiters[one]
                self.idle_since[one] = now

    def wanted(self) -> bool:
        return bool(self.waiters or self.idle_since)

    def next_due(self, now: float) -> Optional[float]:
        """When service() has something to do next if no socket event comes first (an idle
        channel to forget, a subscriber to reconnect or give up); None: nothing until then."""
        if not (self.waiters or self.idle_since):
            return None
        due = None
        if self.idle_since:
            due = next(iter(self.idle_since.values())) + LINGER_S
        for subscriber in self.subscribers:
            at = subscriber.next_due(now)
            if at is not None and (due is None or at < due):
                due = at
        return due

    def service(self, now: float) -> None:
        """Forgets channels idle past LINGER_S, (re)connects the subscribers that need it and
        brings each connected one's subscriptions up to date."""
        while self.idle_since:
            channel, since = next(iter(self.idle_since.items()))
            if now - since < LINGER_S:
                break  # (the others went idle later)
            del self.idle_since[channel]
            self.heard.pop(channel, None)
        channels = set(self.waiters) | set(self.idle_since)
        if self.router is not None and channels:
            self._follow_nodes()
        for subscriber in self.subscribers:
            wanted = channels
            if subscriber.node is not None:
                place, address = subscriber.node
                node_of = self._table.node_of
                wanted = {one for one in channels if node_of(place, one) == address}
            if subscriber.sock is None:
                if not channels or subscriber.backoff.waiting(now):
                    continue
                try:
                    if not subscriber.open(now):
                        continue
                except (OSError, TLSError):
                    self.drop(subscriber, now)
                    continue
            if subscriber.overdue(now):
                self.drop(subscriber, now)
                continue
            if subscriber.state == READY:
                try:
                    subscriber.subscribe(
                        sorted(wanted - subscriber.asked), sorted(subscriber.asked - wanted)
                    )
                except (OSError, TLSError):
                    self.drop(subscriber, now)

    def _follow_nodes(self) -> None:
        """A cluster's subscribers follow its primaries: one for each link of the router's
        newest table (kept while its node stays a primary)."""
        table = self.router().current()  # type: ignore[misc]
        if table is self._table:
            return
        self._table = table
        nodes: dict[tuple[int, tuple[str, int]], Subscriber] = {}
        for spec, place in zip(table.links, table.columns):
            if self.masters[place].cluster is None:
                continue
            node = (place, (spec.host, spec.port))
            kept = self._nodes.pop(node, None)
            nodes[node] = kept if kept is not None else Subscriber(spec, node)
        for gone in self._nodes.values():
            if gone.sock is not None:
                self.on_drop(gone)
            gone.close()
        self._nodes = nodes
        self.subscribers = self._fixed + list(nodes.values())

    def readable(self, subscriber: Subscriber, now: float) -> bool:
        """Reads what came on a subscriber's socket and wakes the waiters of the channels it
        announced. True when a subscriber's socket or what it waits for may have changed (the
        driver looks again; not after notices alone)."""
        was_up = subscriber.state == READY
        events = subscriber.events_wanted()
        try:
            messages = subscriber.on_readable()
        except SubscriberRefused:
            self.drop(subscriber, now, REFUSED_RETRY_S)
            return True
        except (OSError, TLSError, ProtocolError):
            self.drop(subscriber, now)
            return True
        changed = not was_up or subscriber.events_wanted() != events
        if not subscriber.asked and subscriber.state == READY and self.waiters:
            self.service(now)  # (asked again: the master knows no SSUBSCRIBE, or a slot moved)
            changed = True
        for kind, channel in messages:
            if kind == b"message":
                self.wake(channel)
            elif not any(
                channel in other.confirmed for other in self.subscribers if other is not subscriber
            ):
                self.wake(channel)  # the first master that will tell us: try again now
        if not was_up and subscriber.state == READY:
            self.service(now)  # its subscriptions go out at once
        return changed

    def writable(self, subscriber: Subscriber, now: float) -> None:
        was_up = subscriber.state == READY
        try:
            subscriber.on_writable()
        except (OSError, TLSError):
            self.drop(subscriber, now)
            return
        if not was_up and subscriber.state == READY:
            self.service(now)

    def wake(self, channel: bytes) -> None:
        self.heard[channel] = self.heard.get(channel, 0) + 1
        for waiter in self.waiters.get(channel, ()):
            waiter.notify()

    def drop(self, subscriber: Subscriber, now: float, pause_s: Optional[float] = None) -> None:
        """Closes a failed subscriber; it reconnects after a pause (while channels are wanted)."""
        if subscriber.sock is not None:
            self.on_drop(subscriber)
        subscriber.failed(now, pause_s)

    def close_all(self) -> None:
        for subscriber in self.subscribers:
            if subscriber.sock is not None:
                self.on_drop(subscriber)
            subscriber.close()

    def forget_parent(self) -> bool:
        """In a forked child (True): the parent's connections and waiters are not ours (closed
        without a byte sent)."""
        if self.generation == _fork_generation[0]:
            return False
        self.mutex = threading.Lock()
        for subscriber in self.subscribers:
            subscriber.close()
        self.waiters = {}
        self.idle_since = {}
        self.heard.clear()
        self.generation = _fork_generation[0]
        return True


class _ThreadWaiter:
    __slots__ = ("event",)

    def __init__(self) -> None:
        self.event = threading.Event()

    def notify(self) -> None:
        self.event.set()


class ThreadNotices:
    """Release notices for a blocking client: wait() blocks the calling thread until a notice
    for the channel (True) or the timeout (False). The subscribers are read by one thread,
    started by the first wait and ended LINGER_S after the last one, or by close()."""

    # (`heard`, the counts by channel, is the session's too: every attempt of a lock woken by
    # notices reads it there, see Session.heard)
    __slots__ = ("_board", "_kick_r", "_kick_w", "_label", "_session", "_thread", "heard")

    def __init__(self, session: Session) -> None:
        # (closed is the session's to say: set before close() is called)
        self._session = session
        self._board = NoticeBoard(session.masters, router_of(session))
        self.heard = self._board.heard  # (see NoticeBoard.heard)
        self._label = session.label
        self._thread: Optional[threading.Thread] = None
        self._kick_r: Optional[socket.socket] = None
        self._kick_w: Optional[socket.socket] = None

    def wait(self, channel: bytes | tuple[bytes, ...], timeout: float, seen: int = 0) -> bool:
        """True when woken by a notice on `channel` (or any of a tuple's; or when it had more
        than `seen` notices already: see heard_on), False at the timeout."""
        board = self._board
        if board.forget_parent():
            self._thread = None  # (the parent's: it does not run here)
            self._kick_r = self._kick_w = None
        waiter = _ThreadWaiter()
        with board.mutex:
            if self._session.closed:
                return False
            new = board.add(channel, waiter)
            self._ensure_thread()
            if heard_on(board.heard, channel) != seen:
                board.remove(channel, waiter, time.monotonic())
                return True
        if new:
            self._kick()
        try:
            return waiter.event.wait(timeout)
        finally:
            with board.mutex:
                board.remove(channel, waiter, time.monotonic())

    def close(self) -> None:
        """Stops the thread (it has ended when this returns), closes the connections and ends
        the waits (they return at once)."""
        with self._board.mutex:
            thread = self._thread
            for waiting in self._board.waiters.values():
                for waiter in waiting:
                    waiter.notify()
        self._kick()
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _ensure_thread(self) -> None:
        if self._thread is not None:
            return
        self._kick_r, self._kick_w = socket.socketpair()
        self._kick_r.setblocking(False)
        self._kick_w.setblocking(False)
        self._thread = threading.Thread(
            target=self._run,
            args=(self._kick_r,),
            name=f"hiredlock-notices-{self._label}",
            daemon=True,
        )
        self._thread.start()

    def _kick(self) -> None:
        kick = self._kick_w
        if kick is not None:
            # (full: a kick is pending anyway; closed: the thread is ending)
            with contextlib.suppress(OSError):
                kick.send(b"x")

    def _run(self, kick: socket.socket) -> None:
        board = self._board
        try:
            while True:
                now = time.monotonic()
                with board.mutex:
                    if self._session.closed:
                        self._end(kick)
                        return
                    board.service(now)
                    if not board.wanted():  # the last channel's LINGER_S is over
                        self._end(kick)  # the next wait starts another thread
                        return
                    poller = new_poller()
                    poller.register(kick.fileno(), POLLIN)
                    by_fd = {}
                    for subscriber in board.subscribers:
                        if subscriber.sock is not None:
                            by_fd[subscriber.fileno()] = subscriber
                            poller.register(subscriber.fileno(), subscriber.events_wanted())
                ready = poller.poll(TICK_S * 1000)
                now = time.monotonic()
                with board.mutex:
                    for fd, events in ready:
                        ready_one = by_fd.get(fd)
                        if ready_one is None:
                            _drain(kick)
                        elif ready_one.sock is not None and ready_one.fileno() == fd:
                            if events & POLLOUT:
                                board.writable(ready_one, now)
                            if events & ~POLLOUT and ready_one.sock is not None:
                                board.readable(ready_one, now)
        except BaseException:
            with board.mutex:
                if self._thread is threading.current_thread():
                    self._end(kick)
            raise

    def _end(self, kick: socket.socket) -> None:
        """The thread's last act (under the board's mutex): connections and kick sockets
        closed, and no thread recorded, so that the next wait starts one."""
        self._board.close_all()
        kick.close()
        if self._kick_w is not None:
            self._kick_w.close()
        self._kick_r = self._kick_w = None
        self._thread = None


def router_of(session: Session) -> Optional[Callable[[], Any]]:
    """What gives the router of a client with a Redis Cluster among its masters (see
    _engines/routing.py's RoutedEngines), else None."""
    engines = session.engine_class
    return engines.router if isinstance(engines, RoutedEngines) else None


def _drain(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while sock.recv(4096):
            pass


def _nothing(subscriber: Subscriber) -> None:
    pass
