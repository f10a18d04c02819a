"""Passwords never shown: redaction of URLs and messages, and the short form of values that error
messages quote."""

from __future__ import annotations

import math
import re
from typing import Any

REDACTED = "***"

# The password of a URL's user:password@. It runs to the last "@" of the URL (the last before a
# blank, in free text), as urlsplit reads it; a "/" or "?" in it, which urlsplit would take for
# the end of the host, is hidden too: better too much hidden than a piece of a password shown.
_URL_PASSWORD = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]*://[^:@\s]*:)\S*@")
# Query parameters that may carry a secret: password=, pass=, requirepass=, secret=, token=...
_SECRET_PARAMETER = re.compile(
    r"(?P<head>[?&;][^=&#\s]*(?:pass|secret|token|auth)[^=&#\s]*=)[^&#\s]*", re.IGNORECASE
)


def redact(text: str) -> str:
    """`text` (a URL, or a message quoting URLs) with every password in it replaced by ***:
    redis://user:***@host:6379/0, ?password=***."""
    text = _URL_PASSWORD.sub(rf"\g<head>{REDACTED}@", text)
    return _SECRET_PARAMETER.sub(rf"\g<head>{REDACTED}", text)


def shown_url(url: str) -> str:
    """A URL as error messages quote it: redacted, blanks escaped (a blank would end what
    redact() takes for the URL, and a line break has no place in a one-line message)."""
    return redact(re.sub(r"\s", lambda blank: f"%{ord(blank.group()):02X}", url))


def shown(value: Any) -> str:
    """repr(value), short for huge ints (whose repr Python refuses past 4300 digits)."""
    if isinstance(value, int) and value.bit_length() > 64:
        sign = "-" if value < 0 else ""
        return f"an int of about {sign}10**{int(value.bit_length() * math.log10(2))}"
    return repr(value)
