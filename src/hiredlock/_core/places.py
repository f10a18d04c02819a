"""Where a master is, when it has no fixed address: a Sentinel group (the sentinels watching it and
the name they know it by), or a Redis Cluster (the nodes first asked for its slot map).
hiredlock._engines.sentinel and hiredlock._engines.cluster ask them; this is only the description.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

DEFAULT_SENTINEL_PORT = 26379


@dataclass(frozen=True)
class SentinelGroup:
    """The sentinels watching one master, and the name they know it by."""

    sentinels: tuple[tuple[str, int], ...]
    service_name: str
    username: Optional[str] = None  # the sentinels' own credentials, when they require some
    password: Optional[str] = None

    def __str__(self) -> str:
        places = ",".join(
            f"[{host}]:{port}" if ":" in host else f"{host}:{port}" for host, port in self.sentinels
        )
        return f"{places}/{self.service_name}"

    def __repr__(self) -> str:  # never the password
        shown = "None" if self.password is None else "'***'"
        return (
            f"SentinelGroup(sentinels={self.sentinels!r}, service_name={self.service_name!r}, "
            f"username={self.username!r}, password={shown})"
        )


@dataclass(frozen=True)
class ClusterGroup:
    """A Redis Cluster as one master: the nodes first asked for its slot map (any node of the
    cluster knows the whole map; the others it names are asked after them)."""

    seeds: tuple[tuple[str, int], ...]

    def __str__(self) -> str:
        return ",".join(
            f"[{host}]:{port}" if ":" in host else f"{host}:{port}" for host, port in self.seeds
        )
