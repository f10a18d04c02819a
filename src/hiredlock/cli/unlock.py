"""`hiredlock unlock NAME --yes`: an operator clears a stuck lock (Redlock.force_release): every
key of the name on every master, whoever holds it, every kind's included; the fence counter
stays. Without --yes it refuses, and touches nothing."""

from __future__ import annotations

import argparse

from .exits import OK, UNREACHABLE, USAGE, CliError
from .masters import master_urls, namespace, open_redlock
from .output import table

TIMEOUT = 0.5  # seconds each master gets


def command(options: argparse.Namespace) -> int:
    urls, source = master_urls(options.masters)
    if not options.yes:
        raise CliError(
            f"unlock: refusing to remove {options.name!r} on every master without --yes "
            "(its holders lose it at once; see `hiredlock status NAME` first)",
            USAGE,
        )
    prefix = namespace(options.namespace)
    redlock = open_redlock(urls, source, master_timeout=TIMEOUT, namespace=prefix)
    try:
        try:
            report = redlock.force_release(options.name)
        except (ValueError, TypeError) as exc:
            raise CliError(f"NAME: {exc}", USAGE) from None
        quorum = redlock.quorum
    finally:
        redlock.close()
    rows = []
    for master in report:
        if master.outcome.name != "OK":
            what = master.outcome.name.lower() + (f": {master.detail}" if master.detail else "")
            rows.append((master.master, "-", what))
            continue
        removed = ", ".join(
            f"{key.decode('utf-8', 'backslashreplace')} ({count})"
            for key, count in master.removed.items()
        )
        rows.append((master.master, removed or "nothing", "ok"))
    table(("master", "removed (keys)", "outcome"), rows)
    answered = sum(1 for master in report if master.outcome.name == "OK")
    if answered < quorum:
        print(
            f"only {answered} of {len(report)} masters answered (quorum {quorum}): "
            f"{options.name!r} may still be held; run it again once they are back"
        )
        return UNREACHABLE
    cleared = sum(1 for master in report if master.removed)
    print(f"unlocked {options.name!r}: keys removed on {cleared} of {len(report)} masters")
    return OK
