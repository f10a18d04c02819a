"""The checks of a master's options (text, numbers, hosts, paths, TLS, host:port places), each
naming the master (`where`) and the option in its TypeError or ValueError; no I/O."""

from __future__ import annotations

from typing import Any, Optional

from .redaction import shown
from .tls_options import TLS_OPTIONS, TLSConfig, tls_config


def host_port(place: Any, default_port: int, what: str, where: str) -> tuple[str, int]:
    """A sentinel's or a cluster node's 'host:port' ('[v6]:port', or 'host' alone for the
    default port) or (host, port) pair, checked."""
    if isinstance(place, str):
        name, colon, port = place.rpartition(":")
        if not colon:
            name, port = place, str(default_port)
        place = (name[1:-1] if name.startswith("[") and name.endswith("]") else name, port)
    if not isinstance(place, (tuple, list)) or len(place) != 2:
        raise ValueError(
            f"{where}: each {what} must be 'host:port' or a (host, port) pair, got {place!r}"
        )
    options = {"host": place[0], "port": place[1]}
    host = text_option(options, "host", where)
    if not host:
        raise ValueError(f"{where}: a {what}'s host must not be empty")
    check_host(host, where)
    return host, int_option(options, "port", default_port, 1, 65535, where)


def tls_option(options: dict[str, Any], path: Optional[str], where: str) -> Optional[TLSConfig]:
    """The master's TLS settings (ssl=True, or an ssl_context), or None for plain TCP."""
    use = options.get("ssl", False)
    if not isinstance(use, bool):
        raise TypeError(f"{where}: ssl must be a bool, not {type(use).__name__}")
    given = sorted(key for key in options if key in TLS_OPTIONS)
    if options.get("ssl_context") is not None:
        use = True
    if not use:
        if given:
            raise ValueError(f"{where}: {', '.join(given)} given without ssl=True")
        return None
    if path is not None:
        raise ValueError(f"{where}: TLS (ssl) works over TCP only, not on a unix socket")
    return tls_config(options, where)


def text_option(options: dict[str, Any], key: str, where: str) -> Optional[str]:
    """A str option that the engines can send: valid Unicode (never shown: it may be secret)."""
    value = options.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"{where}: {key} must be a str, not {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"{where}: {key} must be valid Unicode text (a lone surrogate at index {exc.start})"
        ) from None
    return value


def check_host(host: str, where: str) -> None:
    if not host:
        raise ValueError(f"{where}: host must not be empty")
    # A NUL would end the host early for the native engine (a C string); a blank or a control
    # character can only fail name resolution, master by master, at every attempt.
    if any(char.isspace() or not char.isprintable() for char in host):
        raise ValueError(f"{where}: host must not contain blanks or control characters: {host!r}")


def check_path(path: str, where: str) -> None:
    if not path:
        raise ValueError(f"{where}: path must not be empty")
    if "\0" in path:  # it would end the path early for the native engine (a C string)
        raise ValueError(f"{where}: path must not contain a NUL character: {path!r}")


def int_option(
    options: dict[str, Any], key: str, default: int, low: int, high: int, where: str
) -> int:
    """An int option, also given as a string of ASCII digits (as URLs and configs carry them)."""
    value = options.get(key, default)
    if isinstance(value, str):
        if not (value.isascii() and value.isdigit()):
            raise ValueError(
                f"{where}: {key} must be an int or a string of digits 0-9, got {value!r}"
            )
        if len(value) > 10:  # out of range anyway, and past 4300 digits int() refuses it
            raise ValueError(
                f"{where}: {key} must be in {low}..{high}, got a number of {len(value)} digits"
            )
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{where}: {key} must be an int, not {type(value).__name__}")
    if not low <= value <= high:
        raise ValueError(f"{where}: {key} must be in {low}..{high}, got {shown(value)}")
    return value
