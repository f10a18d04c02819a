"""A master's TLS options (redis-py's ssl_* names), checked and made into an ssl.SSLContext before
any I/O; the certificate files are read here. hiredlock._engines.tls carries connections through
the context.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from typing import Any, Optional

# The options a master's dict (or a rediss:// URL's query) may give, as redis-py names them.
TLS_OPTIONS = frozenset(
    {
        "ssl_ca_certs",
        "ssl_ca_path",
        "ssl_ca_data",
        "ssl_certfile",
        "ssl_keyfile",
        "ssl_password",
        "ssl_cert_reqs",
        "ssl_check_hostname",
        "ssl_min_version",
        "ssl_ciphers",
        "ssl_server_hostname",
        "ssl_context",
    }
)

_CERT_REQS = {
    "required": ssl.CERT_REQUIRED,
    "optional": ssl.CERT_OPTIONAL,
    "none": ssl.CERT_NONE,
}
_VERSIONS = {
    "TLSv1_2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1_3": ssl.TLSVersion.TLSv1_3,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


@dataclass(frozen=True)
class TLSConfig:
    """A master's TLS settings: the context its connections use, and the name they check."""

    context: ssl.SSLContext = field(compare=False)
    # the name sent as SNI and checked against the certificate (None: the master's host)
    server_hostname: Optional[str] = None

    def __repr__(self) -> str:  # a context says nothing secret, but nothing useful either
        name = "" if self.server_hostname is None else f", server_hostname={self.server_hostname!r}"
        return f"TLSConfig(verify_mode={self.context.verify_mode.name}{name})"


def tls_config(options: dict[str, Any], where: str) -> TLSConfig:
    """The TLSConfig for a master's ssl_* options (all files are read here, before any I/O).

    ValueError or TypeError, naming `where` and the option, for anything that cannot be used.
    """
    server_hostname = options.get("ssl_server_hostname")
    if server_hostname is not None and not (isinstance(server_hostname, str) and server_hostname):
        raise ValueError(f"{where}: ssl_server_hostname must be a non-empty str")
    given = options.get("ssl_context")
    if given is not None:
        if not isinstance(given, ssl.SSLContext):
            raise TypeError(
                f"{where}: ssl_context must be an ssl.SSLContext, not {type(given).__name__}"
            )
        others = sorted(TLS_OPTIONS.intersection(options) - {"ssl_context", "ssl_server_hostname"})
        if others:
            raise ValueError(
                f"{where}: ssl_context is used as it is: {', '.join(others)} cannot go with it"
            )
        return TLSConfig(given, server_hostname)
    cert_reqs = _cert_reqs(options.get("ssl_cert_reqs", "required"), where)
    default_check = cert_reqs == ssl.CERT_REQUIRED
    check_hostname = _flag(options.get("ssl_check_hostname", default_check), where)
    if check_hostname and cert_reqs == ssl.CERT_NONE:
        raise ValueError(
            f"{where}: ssl_check_hostname needs ssl_cert_reqs 'required' or 'optional'"
        )
    context = _context_trusting(options, where)
    context.check_hostname = False  # (before verify_mode may become CERT_NONE)
    context.verify_mode = cert_reqs
    context.check_hostname = check_hostname
    min_version = options.get("ssl_min_version")
    if min_version is not None:
        context.minimum_version = _version(min_version, where)
    certfile = _path(options, "ssl_certfile", where)
    keyfile = _path(options, "ssl_keyfile", where)
    password = options.get("ssl_password")
    if keyfile is not None and certfile is None:
        raise ValueError(f"{where}: ssl_keyfile needs ssl_certfile")
    if password is not None and not isinstance(password, (str, bytes)):
        raise TypeError(f"{where}: ssl_password must be str or bytes")
    if certfile is not None:
        try:
            context.load_cert_chain(certfile, keyfile, password)
        except (OSError, ssl.SSLError, ValueError) as exc:
            raise ValueError(
                f"{where}: ssl_certfile/ssl_keyfile cannot be used: {_why(exc)}"
            ) from None
    ciphers = options.get("ssl_ciphers")
    if ciphers is not None:
        try:
            context.set_ciphers(ciphers)
        except (ssl.SSLError, TypeError) as exc:
            raise ValueError(f"{where}: ssl_ciphers cannot be used: {_why(exc)}") from None
    return TLSConfig(context, server_hostname)


def _context_trusting(options: dict[str, Any], where: str) -> ssl.SSLContext:
    """A client context that trusts the CAs the options name (the system's when none)."""
    ca_certs = _path(options, "ssl_ca_certs", where)
    ca_path = _path(options, "ssl_ca_path", where)
    ca_data = options.get("ssl_ca_data")
    if ca_data is not None and not isinstance(ca_data, (str, bytes)):
        raise TypeError(f"{where}: ssl_ca_data must be str or bytes, not {type(ca_data).__name__}")
    try:
        return ssl.create_default_context(cafile=ca_certs, capath=ca_path, cadata=ca_data)
    except (OSError, ssl.SSLError, ValueError) as exc:
        which = "ssl_ca_data" if ca_certs is None and ca_path is None else "ssl_ca_certs/ca_path"
        raise ValueError(f"{where}: {which} cannot be used: {_why(exc)}") from None


def _why(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror if exc.filename is None else f"{exc.strerror}: {exc.filename!r}"
    return str(exc) or type(exc).__name__


def _path(options: dict[str, Any], key: str, where: str) -> Optional[str]:
    value = options.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise ValueError(f"{where}: {key} must be a non-empty str (a file's path)")
    return value


def _cert_reqs(value: Any, where: str) -> ssl.VerifyMode:
    if isinstance(value, ssl.VerifyMode):
        return value
    if isinstance(value, str) and value.lower() in _CERT_REQS:
        return _CERT_REQS[value.lower()]
    raise ValueError(
        f"{where}: ssl_cert_reqs must be 'required', 'optional' or 'none', got {value!r}"
    )


def _flag(value: Any, where: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in _TRUE | _FALSE:
        return value.lower() in _TRUE
    raise ValueError(f"{where}: ssl_check_hostname must be true or false, got {value!r}")


def _version(value: Any, where: str) -> ssl.TLSVersion:
    if isinstance(value, ssl.TLSVersion):
        return value
    if isinstance(value, str) and value in _VERSIONS:
        return _VERSIONS[value]
    raise ValueError(f"{where}: ssl_min_version must be 'TLSv1_2' or 'TLSv1_3', got {value!r}")
