"""A write that storage refuses from a holder whose lock has expired (a fencing token).

    HIREDLOCK_MASTERS=redis://10.0.0.1:6379/0,... python fenced_write.py

A lock alone cannot stop a holder that was paused (a GC pause, a stopped VM) past its ttl from
writing after someone else took the lock. With `fencing=True` each holder gets `lock.fence`, a
number larger than every earlier holder's; the database keeps the largest fence it has seen and
refuses a write that carries a smaller one. Here an SQLite table plays the database: worker A
takes the lock, is "paused" past its ttl, worker B takes the lock and writes, then A wakes up and
tries to write: refused.
"""

from __future__ import annotations

import os
import sqlite3
import time

from hiredlock import Redlock

MASTERS = os.environ["HIREDLOCK_MASTERS"].split(",")


def open_ledger() -> sqlite3.Connection:
    db = sqlite3.connect(":memory:", isolation_level=None)
    db.execute("CREATE TABLE ledger (id INTEGER PRIMARY KEY, balance INTEGER, fence INTEGER)")
    db.execute("INSERT INTO ledger VALUES (1, 100, 0)")
    return db


def fenced_write(db: sqlite3.Connection, balance: int, fence: int) -> bool:
    """Writes only if no later holder wrote first: one statement, so the check cannot go stale."""
    updated = db.execute(
        "UPDATE ledger SET balance = ?, fence = ? WHERE id = 1 AND fence < ?",
        (balance, fence, fence),
    )
    return updated.rowcount == 1


def main() -> None:
    db = open_ledger()
    with Redlock(MASTERS) as redlock:
        a = redlock.lock("ledger:1", ttl=0.5, fencing=True)
        assert a.acquire(blocking=False)
        time.sleep(0.6)  # A is paused past its ttl: its lock expires on the masters
        assert not a.held

        b = redlock.lock("ledger:1", ttl=10, fencing=True)
        with b:
            assert fenced_write(db, 150, b.fence), "B holds the lock: its write goes through"

        late = fenced_write(db, 90, a.fence)  # A wakes up and writes with its old fence
        print(f"A's fence {a.fence}, B's fence {b.fence}; A's late write accepted: {late}")
        assert not late
    assert db.execute("SELECT balance FROM ledger").fetchone() == (150,)


if __name__ == "__main__":
    main()
