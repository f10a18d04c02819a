"""Ticket race: N processes sell the same tickets, first without a lock, then under hiredlock.

Starts its own Redis servers on free loopback ports: 5 masters for the Redlock quorum and a sixth
"shop" server for the stock, so the lock and the data it guards live apart, as in production. All
are killed, and their temp dir removed, on any exit: normal, error, Ctrl-C or SIGTERM.

    python examples/ticket_race.py [--workers 4] [--tickets 200] [--engine auto|native|python]
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import redis

from hiredlock import Redlock, available_backends

MASTERS = 5
RACE_SLEEP = 0.001  # pause between the read and the write of a sale: widens the race window
START_TIMEOUT = 5.0  # seconds a new redis-server gets to answer PING
PORT_ATTEMPTS = 20  # other programs run redis-servers here: a probed port may be gone by start


class Interrupted(Exception):
    """SIGINT or SIGTERM, as an exception, so that the finally blocks stop sellers and servers."""


def on_signal(signum: int, _frame: object) -> None:
    # Only the first signal counts: a second one (Ctrl-C pressed twice, or `timeout`, which
    # signals the script and then its whole process group) must not cut the cleanup short.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise Interrupted(signum)


def free_port() -> int:
    with socket.socket() as sock:  # the kernel picks a port that is free right now
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def is_ours(proc: subprocess.Popen, port: int) -> bool:
    """True once the server on `port` answers and is `proc`, not another program's server."""
    client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=0.5)
    deadline = time.monotonic() + START_TIMEOUT
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                return client.ping() and client.info("server")["process_id"] == proc.pid
            except redis.ConnectionError:
                time.sleep(0.02)  # not listening yet
        return False  # exited (port taken: bind failed) or never answered
    finally:
        client.close()


def start_server(workdir: str, name: str, servers: list[subprocess.Popen]) -> str:
    """Starts one redis-server on a free loopback port and returns its URL once it answers."""
    for _ in range(PORT_ATTEMPTS):
        port = free_port()
        argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1"]
        argv += ["--save", "", "--appendonly", "no", "--dir", workdir]
        with open(os.path.join(workdir, f"{name}-{port}.log"), "wb") as log:
            # Own session: a terminal Ctrl-C reaches only this script, which stops the sellers
            # first and the servers last, instead of servers vanishing under running sellers.
            proc = subprocess.Popen(argv, stdout=log, stderr=log, start_new_session=True)
        servers.append(proc)  # registered at once: the cleanup kills it whatever happens next
        if is_ours(proc, port):
            return f"redis://127.0.0.1:{port}/0"
        proc.kill()
        proc.wait()
        servers.remove(proc)
    raise RuntimeError(f"could not start redis-server {name} after {PORT_ATTEMPTS} ports")


def sell_one(shop: redis.Redis) -> bool:
    """The naive read-check-write sale; False once sold out. Racy unless a lock is held."""
    stock = int(shop.get("stock"))
    if stock <= 0:
        return False
    time.sleep(RACE_SLEEP)  # ~1 ms for others to read the same stock: makes the race visible
    shop.set("stock", stock - 1)
    shop.incr("sold")
    return True


def seller(shop_url: str, master_urls: list[str] | None, engine: str, barrier) -> None:
    """One seller process: sells until it sees stock 0; under the lock when given masters."""
    shop = redis.Redis.from_url(shop_url)
    redlock = Redlock(master_urls, retry_delay=0.01, backend=engine) if master_urls else None
    try:
        barrier.wait(timeout=30)  # all sellers start together, once their processes are up
        while True:
            with redlock.lock("tickets", ttl=2) if redlock else contextlib.nullcontext():
                if not sell_one(shop):
                    break
    finally:
        shop.close()
        if redlock:
            redlock.close()


def run_round(args: argparse.Namespace, shop: redis.Redis, shop_url: str, master_urls=None):
    """Resets the stock, runs the sellers to the end; returns (tickets sold, seconds)."""
    shop.mset({"stock": args.tickets, "sold": 0})
    # spawn: sellers inherit no server handles, signal handlers or sockets from this process.
    ctx = multiprocessing.get_context("spawn")
    # Made before the sellers start: its semaphores start multiprocessing's resource tracker,
    # which would unblock SIGINT if it started while the sellers start.
    barrier = ctx.Barrier(args.workers + 1)
    procs = [
        ctx.Process(target=seller, args=(shop_url, master_urls, args.engine, barrier), daemon=True)
        for _ in range(args.workers)
    ]
    try:
        # Sellers inherit SIGINT blocked, so a Ctrl-C never reaches them, even while they still
        # import: this process alone handles it and stops them in order. A Ctrl-C arriving
        # meanwhile stays pending here, and is raised once unblocked.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            for proc in procs:
                proc.start()
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        barrier.wait(timeout=30)  # the clock starts when every seller is ready
        start = time.perf_counter()
        for proc in procs:
            proc.join()
        elapsed = time.perf_counter() - start
    finally:  # on Ctrl-C or an error, stop the sellers before the servers go away
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
            if proc.pid is not None:
                proc.join()
    failed = [proc.exitcode for proc in procs if proc.exitcode]
    if failed:
        raise RuntimeError(f"{len(failed)} seller(s) failed, exit codes {failed}")
    return int(shop.get("sold")), elapsed


def print_table(stock: int, rows: list[tuple[str, int, float]]) -> None:
    line = "{:<22}{:>8}{:>8}{:>10}{:>10}{:>10}".format  # 68 columns
    print("\n" + line("round", "sold", "stock", "oversold", "time s", "sales/s"))
    for label, sold, secs in rows:
        print(line(label, sold, stock, sold - stock, f"{secs:.2f}", f"{sold / secs:.0f}"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=4, help="seller processes (4)")
    parser.add_argument("--tickets", type=int, default=200, help="tickets in stock (200)")
    parser.add_argument("--engine", choices=("auto", "native", "python"), default="auto")
    args = parser.parse_args()
    if min(args.workers, args.tickets) < 1:
        parser.error("--workers and --tickets must be at least 1")
    if args.engine != "auto" and args.engine not in available_backends():
        parser.error(f"engine {args.engine!r} not available here: {available_backends()}")

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    workdir = tempfile.mkdtemp(prefix="ticket_race-")
    servers: list[subprocess.Popen] = []
    try:
        master_urls = [start_server(workdir, f"master{i}", servers) for i in range(MASTERS)]
        shop_url = start_server(workdir, "shop", servers)
        with Redlock(master_urls, backend=args.engine) as probe:
            engine = probe.backend  # what "auto" resolves to (sellers resolve it the same way)
        ports = [url.split(":")[2].split("/")[0] for url in [*master_urls, shop_url]]
        print(f"Redis masters on ports {' '.join(ports[:-1])}, shop on {ports[-1]}")
        shop = redis.Redis.from_url(shop_url)

        print(f"Round 1: {args.workers} sellers, {args.tickets} tickets, no lock ...")
        sold1, time1 = run_round(args, shop, shop_url, None)
        print(f"  sold {sold1} of {args.tickets}: oversold by {sold1 - args.tickets}")
        print(f"Round 2: same sale inside rl.lock('tickets'), engine {engine} ...")
        sold2, time2 = run_round(args, shop, shop_url, master_urls)
        print(f"  sold {sold2} of {args.tickets} at {sold2 / time2:.0f} sales/s")

        rows = [("1 no lock", sold1, time1), (f"2 hiredlock/{engine}", sold2, time2)]
        print_table(args.tickets, rows)
        return 0 if sold2 == args.tickets else 1
    except Interrupted as stop:
        name = signal.Signals(stop.args[0]).name
        print(f"\n{name}: stopping, cleaning up", file=sys.stderr)
        return 128 + stop.args[0]
    finally:
        # A signal now must not cut the cleanup short and leave servers running.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for proc in servers:
            proc.kill()  # by pid; their data is throwaway, so no graceful shutdown is needed
        for proc in servers:
            proc.wait()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
