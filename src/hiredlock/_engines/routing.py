"""Which connection carries which key: the places a client counts votes over (its masters, as the
algorithm sees them) expanded into the links its engines keep, and, for each round, the link of
each place that carries each key. The routing rules, once, for both engines:

    links      a standalone master or a Sentinel group is one link; a Redis Cluster is one link
               per primary of its slot map (the nodes as plain masters, with the cluster's TLS
               and login)
    assign     a standalone link carries every key of every round; a cluster's keys each go to
               the primary that its slot map names for the key's slot (the slot of a script's
               KEYS[1]: every key of one script is in that slot, see _core/keys.py)
    redirect   a MOVED or ASK reply names the node that has the slot now: the engine sends the
               key's command there in the same round when that node is a link (ASK: preceded by
               ASKING); MOVED also updates the map for that slot; a node that is not a link yet
               has the map asked again (in the background)
    version    the links change only when a cluster's primaries do (a failover, a new node); the
               router then makes a new table of links, and an engine made on an older one is
               closed and replaced by its owner (pool.py, aio/_rounds.py), never patched

An engine sees one Table, the links it was made with. Clients without a cluster have no router:
their engines route nothing.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Sequence
from typing import Any, Optional

from .._core.masters import MasterSpec
from .._core.slots import SLOTS, key_slot

# A key sent elsewhere this many times in one round votes ERROR with the last reply's text.
MAX_REDIRECTS = 3

# How long the first engine of a client may wait for a cluster's first slot map (the later ones
# come in the background); without one, its seed is the cluster's only link until they do. The
# client lowers it to its per-master timeout (RoutedEngines.limit_first_map_wait): a cluster place
# that does not answer costs the first acquire no more than a standalone master that does not.
FIRST_MAP_WAIT_S = 0.5

# How often the rounds look for slot maps the background lookups found (a cache read).
FOLLOW_EVERY_S = 0.1

_NO_NODE = 255  # (SlotMap.owners: no primary serves the slot)


class Router:
    """The places of one client and the tables of links made from them (one per version)."""

    def __init__(
        self,
        places: Sequence[MasterSpec],
        maps: Any = None,
        first_map_wait_s: float = FIRST_MAP_WAIT_S,
    ) -> None:
        self.first_map_wait_s = first_map_wait_s
        if maps is None:
            from . import cluster as _cluster

            maps = _cluster
        self._maps = maps
        self.places = tuple(places)
        self.n_places = len(self.places)
        self._clusters = [i for i, spec in enumerate(self.places) if spec.cluster is not None]
        self._mutex = threading.Lock()
        self._slot_maps: dict[int, Any] = {}  # place -> the SlotMap its table was made from
        self.version = 0
        self.next_follow = time.monotonic() + FOLLOW_EVERY_S
        self.table = self._make_table(0)

    def current(self) -> Table:
        """The newest table: the one a new engine is made with."""
        self.follow()
        return self.table

    def follow(self) -> None:
        """Takes in the slot maps the background lookups found since (a cache read)."""
        self.next_follow = time.monotonic() + FOLLOW_EVERY_S
        for place in self._clusters:
            found = self._maps.current(self.places[place], 0.0)
            if not isinstance(found, str) and found is not self._slot_maps.get(place):
                self._adopt(place, found)

    def _adopt(self, place: int, slot_map: Any) -> None:
        with self._mutex:
            old = self._slot_maps.get(place)
            self._slot_maps[place] = slot_map
            if old is not None and old.nodes == slot_map.nodes:
                self.table.update(place, slot_map)  # the same links: the slots move
                return
            self.version += 1
            self.table.stale = True
            self.table = self._make_table(self.version)

    def _make_table(self, version: int) -> Table:
        links: list[MasterSpec] = []
        columns: list[int] = []
        firsts: dict[int, int] = {}
        for place, spec in enumerate(self.places):
            if spec.cluster is None:
                links.append(spec)
                columns.append(place)
                continue
            slot_map = self._slot_maps.get(place)
            if slot_map is None:
                found = self._maps.current(spec, self.first_map_wait_s if version == 0 else 0.0)
                if isinstance(found, str):  # no map yet: the first seed serves, and redirects
                    found = _SeedOnly(spec.cluster.seeds[0])
                else:
                    self._slot_maps[place] = found
                slot_map = found
            firsts[place] = len(links)
            for host, port in slot_map.nodes:
                links.append(dataclasses.replace(spec, cluster=None, host=host, port=port, db=0))
                columns.append(place)
        maps = {place: self._slot_maps.get(place) for place in firsts}
        return Table(self, version, tuple(links), tuple(columns), firsts, maps)

    def refresh(self, place: int) -> None:
        """The cluster at `place` changed (a slot moved, a node failed): its map is asked again
        in the background."""
        self._maps.refresh(self.places[place])


class _SeedOnly:
    """A cluster's slot map before any node gave one: its first seed has every slot (it
    redirects the keys it does not have, and a map is asked for meanwhile)."""

    def __init__(self, seed: tuple[str, int]) -> None:
        self.nodes = (seed,)
        self.owners = bytes(SLOTS)


class RoutedEngines:
    """The engine class of a client with a Redis Cluster among its masters: each engine is made
    on the router's newest table, and `engine_stale(engine)` says when its table is out of date (its
    owner then closes it and makes another)."""

    def __init__(self, engine_class: Any, places: Sequence[MasterSpec]) -> None:
        self.engine_class = engine_class
        self.name: str = engine_class.name
        self._places = tuple(places)
        self._router: Optional[Router] = None
        self._mutex = threading.Lock()
        self._first_map_wait_s = FIRST_MAP_WAIT_S

    def limit_first_map_wait(self, seconds: float) -> None:
        """The first engine waits for a cluster's first map at most `seconds` (the client's
        per-master timeout), if that is less than FIRST_MAP_WAIT_S."""
        self._first_map_wait_s = min(FIRST_MAP_WAIT_S, seconds)

    def __call__(self, masters: Sequence[MasterSpec], quorum: Optional[int] = None) -> Any:
        return self.engine_class(masters, quorum, router=self.router().current())

    def router(self) -> Router:
        """The client's router (made with the first engine, or the first release-notice
        subscriber: its lookups are I/O)."""
        with self._mutex:
            if self._router is None:
                self._router = Router(self._places, first_map_wait_s=self._first_map_wait_s)
            return self._router

    @staticmethod
    def engine_stale(engine: Any) -> bool:
        return bool(engine.router.stale)


class Table:
    """The links of one version of a Router, as an engine sees them (see the module doc)."""

    __slots__ = (
        "_addresses",
        "_firsts",
        "_owners",
        "_routed",
        "_router",
        "columns",
        "links",
        "n_places",
        "stale",
        "version",
    )

    def __init__(
        self,
        router: Router,
        version: int,
        links: tuple[MasterSpec, ...],
        columns: tuple[int, ...],
        firsts: dict[int, int],
        slot_maps: dict[int, Any],
    ) -> None:
        self._router = router
        self.version = version
        self.stale = False  # the router has a newer table: engines on this one are replaced
        self.links = links
        self.columns = columns
        self.n_places = router.n_places
        self._firsts = firsts
        self._routed = tuple(column in firsts for column in columns)  # a cluster's link
        # place -> slot -> link index (or -1), and (place, address) -> link index
        self._owners: dict[int, list[int]] = {}
        self._addresses: dict[tuple[int, tuple[str, int]], int] = {}
        for place, slot_map in slot_maps.items():
            if slot_map is not None:
                self.update(place, slot_map)
            else:  # (_SeedOnly: every slot to the place's one link)
                self._owners[place] = [firsts[place]] * SLOTS

    def update(self, place: int, slot_map: Any) -> None:
        """Takes a place's new slot map, whose nodes are this table's links of that place."""
        first = self._firsts[place]
        self._owners[place] = [-1 if node == _NO_NODE else first + node for node in slot_map.owners]
        for node, address in enumerate(slot_map.nodes):
            self._addresses[(place, address)] = first + node

    def assign(self, keys: Sequence[bytes]) -> tuple[Optional[tuple[int, ...]], ...]:
        """Per link: None (every key: a standalone link), () (no key: it takes no part in the
        round), or the indexes of the keys it carries. A key whose slot no primary serves goes
        to the place's first link, which answers with the cluster's error."""
        router = self._router
        if time.monotonic() >= router.next_follow:
            router.follow()
        carried: list[Optional[list[int]]] = [[] if routed else None for routed in self._routed]
        slots = [key_slot(key) for key in keys]
        for place, owners in self._owners.items():
            first = self._firsts[place]
            for index, slot in enumerate(slots):
                link = owners[slot]
                carried[first if link < 0 else link].append(index)  # type: ignore[union-attr]
        return tuple(None if one is None else tuple(one) for one in carried)

    def failed(self, link: int) -> None:
        """A link's connection failed (master_policy: moved): a cluster's node may have lost
        its primary role in a failover, so the cluster's map is asked again (in the
        background)."""
        place = self.columns[link]
        if place in self._firsts:
            self._router.refresh(place)

    def node_of(self, place: int, key: bytes) -> Optional[tuple[str, int]]:
        """The address of the link of `place` that carries `key` (a cluster's)."""
        link = self._owners[place][key_slot(key)]
        if link < 0:
            return None
        spec = self.links[link]
        return (spec.host, spec.port)  # type: ignore[return-value]

    def redirect(self, link: int, text: str) -> Optional[tuple[int, bool]]:
        """The link to send a key's command to after `link` answered `text` (MOVED or ASK), and
        whether ASKING goes first; None when that node is not one of this table's links."""
        parts = text.split()
        if len(parts) != 3 or parts[0] not in ("MOVED", "ASK") or not parts[1].isdigit():
            return None
        host, _, port_text = parts[2].rpartition(":")
        if not port_text.isdigit():
            return None
        place = self.columns[link]
        address = (host.strip("[]"), int(port_text))
        moved = parts[0] == "MOVED"
        target = self._addresses.get((place, address))
        slot = int(parts[1])
        if moved and target is not None and slot < SLOTS:
            self._owners[place][slot] = target
        if moved or target is None:
            self._router.refresh(place)
        return None if target is None else (target, not moved)
