"""Where the masters come from: --masters URL[,URL...] (repeatable), else HIREDLOCK_MASTERS.

The URLs are comma-separated; a Sentinel URL's own list of sentinels
(redis+sentinel://host:port,host:port/service_name/db) and a cluster URL's list of nodes
(redis+cluster://host:port,host:port) stay in one piece: what follows a comma without a scheme
belongs to the Sentinel or cluster URL before it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Optional

from .exits import USAGE, CliError

if TYPE_CHECKING:
    from hiredlock import Redlock

ENV_VAR = "HIREDLOCK_MASTERS"
NAMESPACE_ENV = "HIREDLOCK_NAMESPACE"


def master_urls(option_values: Optional[Sequence[str]]) -> tuple[list[str], str]:
    """The master URLs and where they came from ("--masters" or "HIREDLOCK_MASTERS")."""
    if option_values:
        source, chunks = "--masters", list(option_values)
    else:
        value = os.environ.get(ENV_VAR, "").strip()
        if not value:
            raise CliError(
                f"no masters: give --masters URL[,URL...] or set {ENV_VAR} "
                "(`hiredlock servers` starts local ones)",
                USAGE,
            )
        source, chunks = ENV_VAR, [value]
    urls: list[str] = []
    for chunk in chunks:
        first = len(urls)
        for url in chunk.split(","):
            url = url.strip()
            if not url:
                from hiredlock._core.redaction import redact

                listed = ",".join(redact(part) for part in chunk.split(","))
                raise CliError(f"{source}: empty URL in {listed!r} (URLs are comma-separated)")
            if "://" not in url and len(urls) > first and _has_a_list(urls[-1]):
                urls[-1] += "," + url  # one more sentinel or node of redis+sentinel://h:p,h:p/name
            else:
                urls.append(url)
    return urls, source


def _has_a_list(url: str) -> bool:
    """Whether `url` takes a comma-separated list of places (sentinels, cluster nodes)."""
    return "+sentinel://" in url or "+cluster://" in url


def namespace(option_value: Optional[str]) -> Optional[str]:
    """The prefix of every key and channel: --namespace, else HIREDLOCK_NAMESPACE, else none."""
    if option_value is not None:
        return option_value
    return os.environ.get(NAMESPACE_ENV) or None


def open_redlock(urls: Sequence[str], source: str, **options: Any) -> Redlock:
    """A Redlock on `urls`; a bad URL or option is a usage error naming where it came from."""
    from hiredlock import EngineUnavailable, Redlock
    from hiredlock._core.validation import namespace as checked_namespace

    try:
        checked_namespace(options.get("namespace"))
    except (ValueError, TypeError) as exc:
        raise CliError(f"--namespace (or ${NAMESPACE_ENV}): {exc}", USAGE) from None
    try:
        return Redlock(list(urls), **options)
    except EngineUnavailable as exc:
        raise CliError(str(exc), USAGE) from None
    except (ValueError, TypeError) as exc:
        raise CliError(f"{source}: {exc}", USAGE) from None


def failed_votes(votes: Sequence[Any]) -> str:
    """A short account of a round's failed masters: how many, and the first one's reason."""
    from hiredlock import Outcome

    failed = [vote for vote in votes if vote.outcome not in (Outcome.OK, Outcome.TAKEN)]
    failed = [vote for vote in failed if vote.outcome != Outcome.SKIPPED] or failed
    if not failed:
        return "no master answered in time"
    first = failed[0]
    reason = f"{first.outcome.name.lower()}" + (f": {first.detail}" if first.detail else "")
    more = f"; {len(failed) - 1} more" if len(failed) > 1 else ""
    return f"{len(failed)} of {len(votes)} masters failed ({first.master}: {reason}{more})"


def lost_votes(votes: Sequence[Any]) -> str:
    """What the masters said in the round that found a held lock lost (a renewal or a release):
    how many answered that the key is no longer ours, and which failed to answer."""
    from hiredlock import Outcome
    from hiredlock._core.scripts import FAILURES

    if not votes:
        return "no master was asked"
    gone = sum(1 for vote in votes if vote.outcome == Outcome.TAKEN)
    kept = sum(1 for vote in votes if vote.outcome == Outcome.OK)
    failed = [vote for vote in votes if vote.outcome in FAILURES]
    parts = []
    if gone:
        parts.append(f"{gone} of {len(votes)} masters answered that the key is no longer ours")
    if failed:
        parts.append(failed_votes(votes))
    if kept:
        parts.append(f"{kept} still held it")
    if not gone and not failed:  # every master kept it, but the round ended too late to count
        parts.append("the round took longer than the lock's validity")
    return "; ".join(parts)
