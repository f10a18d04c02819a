"""Turns what callers pass (masters, durations, options) into validated values, before any I/O."""

from __future__ import annotations

import datetime
import math
from dataclasses import dataclass
from typing import Any, Optional, Union
from urllib.parse import parse_qs, unquote, urlsplit

from ._scripts import MAX_TTL_MS

Duration = Union[int, float, datetime.timedelta]
MasterLike = Union[str, dict, Any]  # a URL, a dict of options, or a redis-py client

DEFAULT_PORT = 6379
_DICT_KEYS = frozenset({"host", "port", "db", "username", "password", "path"})


@dataclass(frozen=True)
class MasterSpec:
    """Where one master lives and how to log in. `path` set means a unix socket."""

    host: Optional[str] = None
    port: int = DEFAULT_PORT
    path: Optional[str] = None
    db: int = 0
    username: Optional[str] = None
    password: Optional[str] = None

    def identity(self) -> tuple:
        """Two specs with the same identity are the same master (duplicates are refused)."""
        if self.path is not None:
            return ("unix", self.path, self.db)
        return ("tcp", (self.host or "").lower(), self.port, self.db)

    def __str__(self) -> str:  # never shows the password
        if self.path is not None:
            return f"unix://{self.path}?db={self.db}"
        host = f"[{self.host}]" if self.host and ":" in self.host else self.host
        return f"redis://{host}:{self.port}/{self.db}"


def duration_ms(value: Any, name: str) -> float:
    """Seconds (int, float or timedelta) to milliseconds; refuses bools, NaN, inf, non-numbers."""
    if isinstance(value, bool) or not isinstance(value, (int, float, datetime.timedelta)):
        raise TypeError(
            f"{name} must be a number of seconds or a timedelta, not {type(value).__name__}"
        )
    seconds = value.total_seconds() if isinstance(value, datetime.timedelta) else float(value)
    if math.isnan(seconds) or math.isinf(seconds):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return seconds * 1000.0


def positive_duration_ms(value: Any, name: str) -> float:
    ms = duration_ms(value, name)
    if ms <= 0:
        raise ValueError(f"{name} must be positive, got {value!r}")
    return ms


def ttl_ms(value: Any, name: str = "ttl") -> int:
    """A ttl as whole milliseconds on the wire (rounded down, at least 1), within MAX_TTL_MS."""
    ms = positive_duration_ms(value, name)
    if ms > MAX_TTL_MS:
        raise ValueError(
            f"{name} must be at most {MAX_TTL_MS / 1000:.3f} s (hiredlock.MAX_TTL), got {value!r}"
        )
    if ms < 1:
        raise ValueError(f"{name} must be at least 1 ms, got {value!r}")
    return int(ms)


def lock_name(name: Any) -> bytes:
    """The Redis key for a lock name: the name itself, str encoded as UTF-8."""
    if isinstance(name, str):
        key = name.encode("utf-8")
    elif isinstance(name, (bytes, bytearray, memoryview)):
        key = bytes(name)
    else:
        raise TypeError(f"name must be str or bytes, not {type(name).__name__}")
    if not key:
        raise ValueError("name must not be empty")
    return key


def flag(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, not {type(value).__name__}")
    return value


def non_negative_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")
    return value


def non_negative_seconds(value: Any, name: str) -> float:
    ms = duration_ms(value, name)
    if ms < 0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")
    return ms / 1000.0


def drift_factor(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"drift_factor must be a number, not {type(value).__name__}")
    if not 0 <= value < 0.5:  # also refuses NaN
        raise ValueError(f"drift_factor must be in [0, 0.5), got {value!r}")
    return float(value)


def parse_masters(masters: Any) -> tuple[MasterSpec, ...]:
    if isinstance(masters, (str, bytes, dict)) or not hasattr(masters, "__iter__"):
        raise TypeError(
            f"masters must be a list of URLs, dicts or redis clients, not {type(masters).__name__}"
        )
    specs = tuple(_parse_master(item, index) for index, item in enumerate(masters))
    if not specs:
        raise ValueError("masters must name at least one Redis master")
    seen: dict[tuple, int] = {}
    for index, spec in enumerate(specs):
        first = seen.setdefault(spec.identity(), index)
        if first != index:
            raise ValueError(f"masters[{index}] duplicates masters[{first}] ({spec})")
    return specs


def _parse_master(item: Any, index: int) -> MasterSpec:
    where = f"masters[{index}]"
    if isinstance(item, str):
        return _parse_url(item, where)
    if isinstance(item, dict):
        return _parse_dict(item, where)
    pool = getattr(item, "connection_pool", None)
    kwargs = getattr(pool, "connection_kwargs", None)
    if isinstance(kwargs, dict):
        if "ssl" in getattr(getattr(pool, "connection_class", None), "__name__", "").lower():
            raise ValueError(f"{where}: TLS connections are not supported yet")
        picked = {key: kwargs.get(key) for key in _DICT_KEYS if kwargs.get(key) is not None}
        return _parse_dict(picked, where)
    raise TypeError(
        f"{where} must be a URL string, a dict or a redis-py client, not {type(item).__name__}"
    )


def _parse_dict(options: dict, where: str) -> MasterSpec:
    unknown = sorted(set(options) - _DICT_KEYS)
    if unknown:
        raise ValueError(f"{where}: unknown option(s) {', '.join(map(repr, unknown))}")
    path = options.get("path")
    host = options.get("host")
    if path is not None and host is not None:
        raise ValueError(f"{where}: give either host or path (unix socket), not both")
    if path is None and host is None:
        host = "localhost"
    for key in ("host", "path", "username", "password"):
        value = options.get(key)
        if value is not None and not isinstance(value, str):
            raise TypeError(f"{where}: {key} must be a str, not {type(value).__name__}")
    if path is not None and not path:
        raise ValueError(f"{where}: path must not be empty")
    if host is not None and not host:
        raise ValueError(f"{where}: host must not be empty")
    port = options.get("port", DEFAULT_PORT)
    if isinstance(port, str) and port.isdigit():
        port = int(port)
    if isinstance(port, bool) or not isinstance(port, int):
        raise TypeError(f"{where}: port must be an int, not {type(port).__name__}")
    if not 0 < port < 65536:
        raise ValueError(f"{where}: port must be in 1..65535, got {port}")
    db = options.get("db", 0)
    if isinstance(db, str) and db.isdigit():
        db = int(db)
    if isinstance(db, bool) or not isinstance(db, int):
        raise TypeError(f"{where}: db must be an int, not {type(db).__name__}")
    if db < 0:
        raise ValueError(f"{where}: db must be >= 0, got {db}")
    return MasterSpec(
        host=host,
        port=port if path is None else DEFAULT_PORT,
        path=path,
        db=db,
        username=options.get("username") or None,
        password=options.get("password") or None,
    )


def _parse_url(url: str, where: str) -> MasterSpec:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"{where}: bad URL {url!r}: {exc}") from None
    query = {key: values[-1] for key, values in parse_qs(parts.query).items()}
    unknown = sorted(set(query) - {"db", "password", "username"})
    if unknown:
        raise ValueError(f"{where}: bad URL {url!r}: unknown parameter(s) {', '.join(unknown)}")
    options: dict[str, Any] = {}
    if parts.username:
        options["username"] = unquote(parts.username)
    if parts.password:
        options["password"] = unquote(parts.password)
    for key in ("username", "password"):
        if key in query:
            options[key] = query[key]
    if "db" in query:
        options["db"] = _url_db(query["db"], url, where)
    if parts.scheme == "redis":
        if not parts.hostname:
            raise ValueError(f"{where}: bad URL {url!r}: no host")
        options["host"] = parts.hostname
        if port is not None:
            options["port"] = port
        path = parts.path.strip("/")
        if path:
            options["db"] = _url_db(path, url, where)
    elif parts.scheme == "unix":
        if not parts.path:
            raise ValueError(f"{where}: bad URL {url!r}: no socket path")
        options["path"] = parts.path
    elif parts.scheme == "rediss":
        raise ValueError(f"{where}: TLS (rediss://) is not supported yet: {url!r}")
    else:
        raise ValueError(
            f"{where}: bad URL {url!r}: expected redis://host:port/db or unix:///path?db=N"
        )
    return _parse_dict(options, where)


def _url_db(text: str, url: str, where: str) -> int:
    if not text.isdigit():
        raise ValueError(f"{where}: bad URL {url!r}: db must be a non-negative integer")
    return int(text)
