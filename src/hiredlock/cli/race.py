"""One seller of the ticket race, as a process: `python -m hiredlock.cli.race CONFIG_JSON`, with
the servers' URLs in the environment (URLS_ENV).

A sale is the naive read-check-write: GET the stock; if > 0, wait RACE_SLEEP, SET stock - 1 and
INCR sold. With no lock, sellers interleave and sell the same ticket twice. The seller that reads
the stock `crash_at` first is killed there, holding the lock, before it writes anything: a crash
that leaves the count exact but the lock taken. (Only the first: the next seller to get the lock
reads the same stock again.)
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import Any

RACE_SLEEP = 0.001  # seconds between the read and the write: wide enough to lose updates
NO_LOCK, NAIVE, HIREDLOCK = "none", "naive", "hiredlock"
STARTUP_TIMEOUT = 60  # seconds a seller waits for the start signal
# The URLs may carry passwords: they travel in the environment, which only the user (and root)
# can read, not on the command line, which every local user can (ps).
URLS_ENV = "HIREDLOCK_DEMO_URLS"
URL_KEYS = ("shop", "masters")


class Keys:
    """The demo's keys on the shop server (and the hiredlock lock's name on the masters)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.stock = prefix + "stock"
        self.sold = prefix + "sold"
        self.naive_lock = prefix + "naive-lock"
        self.ready = prefix + "ready"
        self.go = prefix + "go"
        self.crashed = prefix + "crashed"
        self.lock = prefix + "lock"

    def shop_keys(self) -> list[str]:
        return [self.stock, self.sold, self.naive_lock, self.ready, self.go, self.crashed]


def sell_one(shop: Any, keys: Keys, crash_at: int) -> bool:
    """One sale; False once sold out. Racy unless a lock is held."""
    stock = int(shop.get(keys.stock))
    if stock <= 0:
        return False
    if stock == crash_at and shop.setnx(keys.crashed, os.getpid()):
        os.kill(os.getpid(), signal.SIGKILL)  # a crash: no finally, no release
    time.sleep(RACE_SLEEP)
    shop.set(keys.stock, stock - 1)
    shop.incr(keys.sold)
    return True


def sell(config: dict[str, Any]) -> None:
    from .clients import redis_client

    keys = Keys(config["prefix"])
    crash_at = config["crash_at"]
    shop = redis_client(config["shop"], socket_timeout=30)
    if config["mode"] == HIREDLOCK:
        from hiredlock import Redlock

        # Generous timeouts and retries: a busy machine slows the servers, not the outcome.
        redlock = Redlock(
            config["masters"],
            retry_delay=0.01,
            retry_count=20,
            master_timeout=0.2,
            backend=config["engine"],
        )
        lock = redlock.lock(keys.lock, ttl=config["ttl"])
    shop.rpush(keys.ready, os.getpid())
    if shop.blpop([keys.go], timeout=STARTUP_TIMEOUT) is None:
        raise RuntimeError("no start signal")
    while True:
        if config["mode"] == NO_LOCK:
            if not sell_one(shop, keys, crash_at):
                break
        elif config["mode"] == NAIVE:
            while not shop.setnx(keys.naive_lock, 1):  # no token, no expiry
                time.sleep(0.001)
            try:
                if not sell_one(shop, keys, crash_at):
                    break
            finally:
                shop.delete(keys.naive_lock)
        else:
            with lock:  # waits while another seller holds it
                if not sell_one(shop, keys, crash_at):
                    break


def main(argv: list[str]) -> int:
    config = {**json.loads(argv[1]), **json.loads(os.environ.pop(URLS_ENV))}
    from .servers import die_with_parent

    die_with_parent()
    if os.getppid() != config["parent"]:  # the demo ended before we got here
        return 1
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the demo stops us (by pid) when it stops
    try:
        sell(config)
    except Exception as exc:
        print(f"seller {os.getpid()}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
