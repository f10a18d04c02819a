"""The masters a client is given (URLs, dicts of options, redis-py clients) turned into MasterSpecs,
checked before any I/O.

The forms of a master:
- redis://[user:password@]host[:port][/db], rediss://... (TLS: the ssl_* query parameters),
  unix:///path?db=N;
- redis+sentinel://[user:password@]host:port[,host:port...]/service_name[/db] (and
  rediss+sentinel://): a Sentinel group's master;
- redis+cluster://[user:password@]host:port[,host:port...] (and rediss+cluster://, with the ssl_*
  query parameters of rediss://): a whole Redis Cluster as one master. The nodes given are the
  seeds asked for the slot map; the login and TLS settings apply to every node; a cluster has only
  db 0 (a /db path or ?db= other than 0 is refused);
- a dict of options: host, port, db, username, password, path, ssl and the ssl_* options; or
  sentinels ("host:port" or (host, port) pairs) or sentinel (a redis-py Sentinel) with
  service_name; or cluster ("host:port" or (host, port) pairs, or a redis-py RedisCluster) with
  the login and ssl options;
- a redis-py client: Redis (its address and options), one from Sentinel.master_for(), or a
  RedisCluster (the nodes it knows as seeds, and its login and TLS options).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Optional, Union
from urllib.parse import parse_qs, unquote, urlsplit

from .master_options import (
    check_host,
    check_path,
    host_port,
    int_option,
    text_option,
    tls_option,
)
from .places import DEFAULT_SENTINEL_PORT, ClusterGroup, SentinelGroup
from .redaction import REDACTED, shown_url
from .tls_options import TLS_OPTIONS, TLSConfig

MasterLike = Union[str, dict[str, Any], Any]  # a URL, a dict of options, or a redis-py client

DEFAULT_PORT = 6379
MAX_DB = 2**31 - 1  # Redis numbers its databases with a C int
_ADDRESS_KEYS = frozenset({"host", "port", "db", "username", "password", "path"})
_SENTINEL_KEYS = frozenset(
    {"sentinels", "sentinel", "service_name", "sentinel_username", "sentinel_password"}
)
_DICT_KEYS = _ADDRESS_KEYS | {"ssl", "cluster"} | TLS_OPTIONS | _SENTINEL_KEYS
# A rediss:// URL's query may carry these (a context or a CA's text has no place in a URL).
_URL_TLS_PARAMETERS = TLS_OPTIONS - {"ssl_context", "ssl_ca_data"}
# What a redis-py client with TLS may have set that hiredlock does not do: refused, not ignored.
_CLIENT_TLS_UNSUPPORTED = (
    "ssl_validate_ocsp",
    "ssl_validate_ocsp_stapled",
    "ssl_ocsp_context",
    "ssl_ocsp_expected_cert",
    "ssl_include_verify_flags",
    "ssl_exclude_verify_flags",
)


@dataclass(frozen=True)
class MasterSpec:
    """Where one master lives and how to log in. `path` set means a unix socket; `tls` set, a
    TLS connection (rediss://); `sentinel` set, a Sentinel group's master, wherever the sentinels
    say it is (host and path are None); `cluster` set, a whole Redis Cluster counted as one
    master (host and path are None; db 0; login and TLS are every node's); `memory` set, a master
    in this process (hiredlock.testing's: its engine, release notices and faults are its own)."""

    host: Optional[str] = None
    port: int = DEFAULT_PORT
    path: Optional[str] = None
    db: int = 0
    username: Optional[str] = None
    password: Optional[str] = None
    tls: Optional[TLSConfig] = None
    sentinel: Optional[SentinelGroup] = None
    memory: Optional[Any] = None
    cluster: Optional[ClusterGroup] = None

    def identity(self) -> tuple[Any, ...]:
        """Two specs with the same identity are the same master (duplicates are refused)."""
        if self.memory is not None:
            return ("memory", id(self.memory))
        if self.sentinel is not None:
            places = frozenset((host.lower(), port) for host, port in self.sentinel.sentinels)
            return ("sentinel", places, self.sentinel.service_name, self.db)
        if self.cluster is not None:
            return ("cluster", frozenset((host.lower(), port) for host, port in self.cluster.seeds))
        if self.path is not None:
            return ("unix", self.path, self.db)
        return ("tcp", (self.host or "").lower(), self.port, self.db)

    def __str__(self) -> str:  # the master's name in votes and messages: no credentials
        if self.memory is not None:
            return str(self.memory)
        if self.path is not None:
            return f"unix://{self.path}?db={self.db}"
        if self.sentinel is not None:
            scheme = "redis+sentinel" if self.tls is None else "rediss+sentinel"
            return f"{scheme}://{self.sentinel}/{self.db}"
        if self.cluster is not None:
            scheme = "redis+cluster" if self.tls is None else "rediss+cluster"
            return f"{scheme}://{self.cluster}"
        host = f"[{self.host}]" if self.host and ":" in self.host else self.host
        scheme = "redis" if self.tls is None else "rediss"
        return f"{scheme}://{host}:{self.port}/{self.db}"

    def __repr__(self) -> str:  # says whether a password is set, never which
        fields = ", ".join(
            f"{field.name}={self._shown_field(field.name)}"
            for field in dataclasses.fields(self)
            # (only a memory master's memory, only a cluster's cluster)
            if field.name not in ("memory", "cluster") or getattr(self, field.name) is not None
        )
        return f"MasterSpec({fields})"

    def _shown_field(self, name: str) -> str:
        value = getattr(self, name)
        return repr(REDACTED) if name == "password" and value is not None else repr(value)


def parse_masters(masters: Any) -> tuple[MasterSpec, ...]:
    if isinstance(masters, (str, bytes, dict)) or not hasattr(masters, "__iter__"):
        raise TypeError(
            f"masters must be a list of URLs, dicts or redis clients, not {type(masters).__name__}"
        )
    specs = tuple(_parse_master(item, index) for index, item in enumerate(masters))
    if not specs:
        raise ValueError("masters must name at least one Redis master")
    in_memory = sum(spec.memory is not None for spec in specs)
    if in_memory and in_memory != len(specs):
        raise ValueError(
            "masters mixes memory masters (hiredlock.testing) with Redis servers: a client's "
            "masters are all in memory or all servers"
        )
    seen: dict[tuple[Any, ...], int] = {}
    for index, spec in enumerate(specs):
        first = seen.setdefault(spec.identity(), index)
        if first != index:
            raise ValueError(f"masters[{index}] duplicates masters[{first}] ({spec})")
    return specs


def _parse_master(item: Any, index: int) -> MasterSpec:
    where = f"masters[{index}]"
    if isinstance(item, MasterSpec):
        return item
    if getattr(type(item), "hiredlock_memory_master", False):
        return MasterSpec(host=None, memory=item)
    if isinstance(item, str):
        return _parse_url(item, where)
    if isinstance(item, dict):
        return _parse_dict(item, where)
    if _is_redis_cluster(item):
        return _parse_dict({"cluster": item}, where)
    pool = getattr(item, "connection_pool", None)
    kwargs = getattr(pool, "connection_kwargs", None)
    if isinstance(kwargs, dict):
        return _parse_client(pool, kwargs, where)
    raise TypeError(
        f"{where} must be a URL string, a dict or a redis-py client, not {type(item).__name__}"
    )


def _parse_client(pool: Any, kwargs: dict[str, Any], where: str) -> MasterSpec:
    """A redis-py client's address and credentials, when they can be read without I/O."""
    connection_class = getattr(pool, "connection_class", None)
    _check_connection_class(connection_class, where)
    classes = f"{type(pool).__name__} {getattr(connection_class, '__name__', '')}".lower()
    instead = "pass the current master's address as a URL or dict instead"
    if "sentinel" in classes:
        # Sentinel.master_for()'s pool: its service name and its Sentinel, both public
        manager = getattr(pool, "sentinel_manager", None)
        service_name = getattr(pool, "service_name", None)
        if manager is None or service_name is None:
            raise ValueError(f"{where}: this Sentinel client names no sentinels; {instead}")
        options = {"sentinel": manager, "service_name": service_name}
        options.update(
            (key, kwargs[key]) for key in ("db", "username", "password") if kwargs.get(key)
        )
        return _parse_dict(options, where)
    tls_options: dict[str, Any] = {}
    if "ssl" in classes:
        tls_options = _client_tls_options(kwargs, where)
    if kwargs.get("credential_provider") is not None:
        raise ValueError(
            f"{where}: the client's credentials come from a credential_provider, which hiredlock "
            "cannot read; pass a URL or dict with the username and password instead"
        )
    if kwargs.get("host") is None and kwargs.get("path") is None:
        raise ValueError(
            f"{where}: the client's connection pool names no host and no unix socket path, so "
            f"its address cannot be read; {instead}"
        )
    picked = {key: kwargs.get(key) for key in _ADDRESS_KEYS if kwargs.get(key) is not None}
    return _parse_dict({**picked, **tls_options}, where)


# Whose connection classes go to the address in their pool: redis-py's, and valkey-py's (its fork).
_SOCKET_CLIENT_PACKAGES = frozenset({"redis", "valkey"})
TESTING_DOCS = "https://hiredlock.readthedocs.io/en/latest/testing/"


def _check_connection_class(connection_class: Any, where: str) -> None:
    """hiredlock reads a client's address and connects there itself: a client whose connections
    are a class of another package (fakeredis's, a server in the process) has no address to
    reach. Refused here, before a late 'cannot resolve' from a made-up host name."""
    module = getattr(connection_class, "__module__", None)
    if connection_class is None or not isinstance(module, str):
        return
    if module.partition(".")[0] in _SOCKET_CLIENT_PACKAGES:
        return
    raise TypeError(
        f"{where} is a client whose connections are {connection_class.__name__} (from {module}), "
        "not redis-py's: hiredlock connects to its masters itself, so a server inside the "
        "process (fakeredis) cannot be one. In tests, use hiredlock.testing.memory_masters() or "
        f"real redis-servers (the hiredlock pytest plugin starts them): see {TESTING_DOCS}"
    )


def _client_tls_options(kwargs: dict[str, Any], where: str) -> dict[str, Any]:
    """A redis-py TLS client's settings, as this module's ssl_* options."""
    for key in _CLIENT_TLS_UNSUPPORTED:
        if kwargs.get(key):
            raise ValueError(f"{where}: the client sets {key}, which hiredlock does not support")
    options: dict[str, Any] = {"ssl": True}
    for key in TLS_OPTIONS - {"ssl_context", "ssl_server_hostname"}:
        if kwargs.get(key) is not None:
            options[key] = kwargs[key]
    # redis-py's own defaults, where the client left them unset
    options.setdefault("ssl_cert_reqs", "required")
    options.setdefault("ssl_check_hostname", False)
    if options["ssl_cert_reqs"] is None:
        options["ssl_cert_reqs"] = "none"
    return options


def _parse_dict(options: dict[str, Any], where: str) -> MasterSpec:
    unknown = sorted(set(options) - _DICT_KEYS, key=repr)
    if unknown:
        raise ValueError(f"{where}: unknown option(s) {', '.join(map(repr, unknown))}")
    path = text_option(options, "path", where)
    host = text_option(options, "host", where)
    if path is not None and host is not None:
        raise ValueError(f"{where}: give either host or path (unix socket), not both")
    if "sentinels" in options or "sentinel" in options:
        if "cluster" in options:
            raise ValueError(f"{where}: give cluster or sentinels, not both")
        return _parse_sentinel_dict(options, host, path, where)
    if "cluster" in options:
        return _parse_cluster_dict(options, host, path, where)
    for key in sorted(_SENTINEL_KEYS.intersection(options)):
        raise ValueError(f"{where}: {key} needs sentinels (a Sentinel-managed master)")
    if path is None and host is None:
        host = "localhost"
    if path is not None:
        check_path(path, where)
    if host is not None:
        check_host(host, where)
    port = int_option(options, "port", DEFAULT_PORT, 1, 65535, where)
    tls = tls_option(options, path, where)
    return MasterSpec(
        host=host,
        port=port if path is None else DEFAULT_PORT,
        path=path,
        db=int_option(options, "db", 0, 0, MAX_DB, where),
        username=text_option(options, "username", where) or None,
        password=text_option(options, "password", where) or None,
        tls=tls,
    )


def _parse_sentinel_dict(
    options: dict[str, Any], host: Optional[str], path: Optional[str], where: str
) -> MasterSpec:
    """A Sentinel group's master: `sentinels` (host:port strings or (host, port) pairs) or a
    redis-py `sentinel` (its sentinels and credentials are read), and `service_name`."""
    if host is not None or path is not None or "port" in options:
        raise ValueError(
            f"{where}: a Sentinel-managed master has no host, port or path of its own "
            "(the sentinels say where it is)"
        )
    given = options.get("sentinel")
    if given is not None:
        if "sentinels" in options:
            raise ValueError(f"{where}: give sentinels or sentinel (a redis-py Sentinel), not both")
        options = {**_redis_py_sentinel(given, where), **options}
    places: Any = options.get("sentinels")
    if isinstance(places, (str, bytes)) or not hasattr(places, "__iter__"):
        raise TypeError(f"{where}: sentinels must be a list of 'host:port' or (host, port)")
    sentinels = tuple(
        host_port(place, DEFAULT_SENTINEL_PORT, "sentinel", where) for place in places
    )
    if not sentinels:
        raise ValueError(f"{where}: sentinels must name at least one sentinel")
    service_name = text_option(options, "service_name", where)
    if not service_name:
        raise ValueError(f"{where}: a Sentinel-managed master needs its service_name")
    group = SentinelGroup(
        sentinels,
        service_name,
        text_option(options, "sentinel_username", where) or None,
        text_option(options, "sentinel_password", where) or None,
    )
    return MasterSpec(
        host=None,
        port=DEFAULT_PORT,
        db=int_option(options, "db", 0, 0, MAX_DB, where),
        username=text_option(options, "username", where) or None,
        password=text_option(options, "password", where) or None,
        tls=tls_option(options, None, where),
        sentinel=group,
    )


def _parse_cluster_dict(
    options: dict[str, Any], host: Optional[str], path: Optional[str], where: str
) -> MasterSpec:
    """A Redis Cluster: `cluster` is its seed nodes ('host:port' or (host, port) pairs) or a
    redis-py RedisCluster (the nodes it knows, its login and TLS options are read)."""
    if host is not None or path is not None or "port" in options:
        raise ValueError(
            f"{where}: a cluster has no host, port or path of its own (give its nodes in cluster)"
        )
    for key in sorted(_SENTINEL_KEYS.intersection(options)):
        raise ValueError(f"{where}: {key} needs sentinels (a Sentinel-managed master)")
    given = options["cluster"]
    if _is_redis_cluster(given):
        options = {**_redis_py_cluster(given, where), **options}
        given = options["cluster"] = options.pop("_seeds")
    if isinstance(given, (str, bytes)) or not hasattr(given, "__iter__"):
        raise TypeError(
            f"{where}: cluster must be a list of 'host:port' or (host, port), or a redis-py "
            f"RedisCluster, not {type(given).__name__}"
        )
    seeds = tuple(
        dict.fromkeys(host_port(node, DEFAULT_PORT, "cluster node", where) for node in given)
    )
    if not seeds:
        raise ValueError(f"{where}: cluster must name at least one node")
    db = int_option(options, "db", 0, 0, MAX_DB, where)
    if db != 0:
        raise ValueError(f"{where}: a Redis Cluster has only db 0, got db {db}")
    return MasterSpec(
        host=None,
        port=DEFAULT_PORT,
        username=text_option(options, "username", where) or None,
        password=text_option(options, "password", where) or None,
        tls=tls_option(options, None, where),
        cluster=ClusterGroup(seeds),
    )


def _is_redis_cluster(item: Any) -> bool:
    """A redis-py RedisCluster (sync or asyncio): it has no connection pool of its own, but the
    nodes it knows and their connections' options."""
    return callable(getattr(item, "get_nodes", None)) and callable(
        getattr(item, "get_connection_kwargs", None)
    )


def _redis_py_cluster(client: Any, where: str) -> dict[str, Any]:
    """The seeds (the nodes it knows), login and TLS options of a redis-py RedisCluster, read
    through its public get_nodes() and get_connection_kwargs()."""
    kwargs = client.get_connection_kwargs()
    if not isinstance(kwargs, dict):
        raise TypeError(f"{where}: cannot read this RedisCluster's connection options")
    _check_connection_class(kwargs.get("connection_class"), where)
    if kwargs.get("credential_provider") is not None:
        raise ValueError(
            f"{where}: the client's credentials come from a credential_provider, which hiredlock "
            "cannot read; pass a URL or dict with the username and password instead"
        )
    seeds = []
    for node in client.get_nodes():
        host, port = getattr(node, "host", None), getattr(node, "port", None)
        if host is None or port is None:
            raise ValueError(f"{where}: a node of this RedisCluster has no address")
        seeds.append((host, port))
    options: dict[str, Any] = {"_seeds": seeds}
    options.update((key, kwargs[key]) for key in ("username", "password") if kwargs.get(key))
    connection_class = getattr(kwargs.get("connection_class"), "__name__", "")
    if kwargs.get("ssl") or "ssl" in connection_class.lower():
        options.update(_client_tls_options(kwargs, where))
    return options


def _redis_py_sentinel(sentinel: Any, where: str) -> dict[str, Any]:
    """The sentinels and credentials of a redis-py Sentinel (its public attributes)."""
    clients = getattr(sentinel, "sentinels", None)
    if not isinstance(clients, list):
        raise TypeError(
            f"{where}: sentinel must be a redis-py Sentinel, not {type(sentinel).__name__}"
        )
    places = []
    for client in clients:
        kwargs = getattr(getattr(client, "connection_pool", None), "connection_kwargs", None)
        if not isinstance(kwargs, dict) or kwargs.get("host") is None:
            raise ValueError(f"{where}: a sentinel of this redis-py Sentinel has no address")
        places.append((kwargs["host"], kwargs.get("port", DEFAULT_SENTINEL_PORT)))
    options: dict[str, Any] = {"sentinels": places}
    own = getattr(sentinel, "sentinel_kwargs", None) or {}
    for key in ("username", "password"):
        if own.get(key):
            options[f"sentinel_{key}"] = own[key]
    master = getattr(sentinel, "connection_kwargs", None) or {}
    options.update((key, master[key]) for key in ("username", "password") if master.get(key))
    return options


def _parse_url(url: str, where: str) -> MasterSpec:
    def bad_url(reason: str) -> ValueError:
        return ValueError(f"{where}: bad URL {shown_url(url)!r}: {reason}")

    if url.startswith(("redis+sentinel://", "rediss+sentinel://")):
        return _parse_sentinel_url(url, where, bad_url)
    if url.startswith(("redis+cluster://", "rediss+cluster://")):
        return _parse_cluster_url(url, where, bad_url)
    parts, port = _split_url(url, bad_url)
    query = {key: values[-1] for key, values in parse_qs(parts.query).items()}
    allowed = {"db", "password", "username"}
    if parts.scheme == "rediss":
        allowed |= _URL_TLS_PARAMETERS
    unknown = sorted(set(query) - allowed)
    if unknown:
        raise bad_url(f"unknown parameter(s) {', '.join(unknown)}")
    options: dict[str, Any] = {}
    if parts.username:
        options["username"] = unquote(parts.username)
    if parts.password:
        options["password"] = unquote(parts.password)
    for key in ("username", "password"):
        if key in query:
            options[key] = query[key]
    if "db" in query:
        options["db"] = _url_db(query["db"], bad_url)
    if parts.scheme == "rediss":
        options["ssl"] = True
        options.update((key, query[key]) for key in _URL_TLS_PARAMETERS if key in query)
    if parts.scheme in ("redis", "rediss"):
        if not parts.hostname:
            raise bad_url("no host")
        options["host"] = parts.hostname
        if port is not None:
            options["port"] = port
        path = parts.path.strip("/")
        if path:
            options["db"] = _url_db(path, bad_url)
    elif parts.scheme == "unix":
        if not parts.path:
            raise bad_url("no socket path")
        options["path"] = parts.path
    else:
        raise bad_url("expected redis://host:port/db, rediss://host:port/db or unix:///path?db=N")
    return _parse_dict(options, where)


def _parse_sentinel_url(url: str, where: str, bad_url: Callable[[str], ValueError]) -> MasterSpec:
    """redis+sentinel://[user:password@]host:port[,host:port...]/service_name[/db][?query]: the
    credentials are the master's; sentinel_username and sentinel_password the sentinels'."""
    options, hosts, path = _hosts_url(
        url, bad_url, {"sentinel_username", "sentinel_password"}, "rediss+sentinel"
    )
    if not hosts:
        raise bad_url("no sentinel host")
    options["sentinels"] = [place for place in hosts.split(",") if place]
    segments = [segment for segment in path.split("/") if segment]
    if not segments:
        raise bad_url("no service name (redis+sentinel://host:port/service_name/db)")
    if len(segments) > 2:
        raise bad_url("expected /service_name or /service_name/db after the sentinels")
    options["service_name"] = unquote(segments[0])
    if len(segments) == 2:
        options["db"] = _url_db(segments[1], bad_url)
    elif "db" in options:
        options["db"] = _url_db(options["db"], bad_url)
    return _parse_dict(options, where)


def _parse_cluster_url(url: str, where: str, bad_url: Callable[[str], ValueError]) -> MasterSpec:
    """redis+cluster://[user:password@]host:port[,host:port...][/0][?query] (rediss+cluster:// with
    the ssl_* parameters of rediss://): the nodes are the seeds; a cluster has only db 0."""
    options, hosts, path = _hosts_url(url, bad_url, set(), "rediss+cluster")
    if not hosts:
        raise bad_url("no cluster node")
    options["cluster"] = [node for node in hosts.split(",") if node]
    segments = [segment for segment in path.split("/") if segment]
    if len(segments) > 1:
        raise bad_url("expected nothing or /0 after the cluster's nodes")
    if segments:
        options["db"] = _url_db(segments[0], bad_url)
    elif "db" in options:
        options["db"] = _url_db(options["db"], bad_url)
    return _parse_dict(options, where)


def _hosts_url(
    url: str, bad_url: Callable[[str], ValueError], parameters: set[str], tls_scheme: str
) -> tuple[dict[str, Any], str, str]:
    """What a URL naming several hosts (a Sentinel group's, a cluster's) says before its path:
    its options (the query's db, username, password and `parameters`, the ssl_* ones too for
    `tls_scheme`; the credentials), its comma-separated hosts, and its path. urlsplit() is not
    used: it takes one host."""
    scheme, _, rest = url.partition("://")
    rest, _, query_text = rest.partition("?")
    rest, _, _fragment = rest.partition("#")
    netloc, _, path = rest.partition("/")
    query = {key: values[-1] for key, values in parse_qs(query_text).items()}
    allowed = {"db", "password", "username"} | parameters
    options: dict[str, Any] = {}
    if scheme == tls_scheme:
        allowed |= _URL_TLS_PARAMETERS
        options["ssl"] = True
    unknown = sorted(set(query) - allowed)
    if unknown:
        raise bad_url(f"unknown parameter(s) {', '.join(unknown)}")
    options.update(query)
    credentials, at, hosts = netloc.rpartition("@")
    if at:
        username, colon, password = credentials.partition(":")
        if username:
            options["username"] = unquote(username)
        if colon and password:
            options["password"] = unquote(password)
    return options, hosts, path


def _split_url(url: str, bad_url: Callable[[str], ValueError]) -> tuple[Any, Optional[int]]:
    """urlsplit() and the port; its own errors are not passed on: they quote the host part, and
    with it the password."""
    try:
        parts = urlsplit(url)
    except ValueError:
        raise bad_url("not a URL (an unclosed [ or a character a host cannot have)") from None
    try:
        return parts, parts.port
    except ValueError:
        hint = " (a / ? # or @ in a password must be percent-encoded)" if "@" in url else ""
        raise bad_url(f"port must be a number in 1..65535{hint}") from None


def _url_db(text: str, bad_url: Callable[[str], ValueError]) -> str:
    """The db of a URL, still as text: _parse_dict checks its range."""
    if not (text.isascii() and text.isdigit()):
        raise bad_url("db must be a non-negative integer")
    return text
