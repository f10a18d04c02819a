"""One acquire+release cycle over TLS beside the same cycle in plaintext, on five redis-servers of
their own that listen on both (certificates made with trustme, as the tests make them): hiredlock's
two engines at N=1 and N=5, and redis-py's Lock (single-instance: N=1)."""

from __future__ import annotations

import os

import pytest
from libs import open_cycle
from servers import RedisServer
from timing import bench_rounds
from tls_support import make_certs

ROWS = [(1, "native"), (1, "python"), (1, "redis-py"), (5, "native"), (5, "python")]
TRANSPORTS = ("plain", "tls")


@pytest.fixture(scope="session")
def tls_masters(tmp_path_factory, recorder):
    certs = make_certs(str(tmp_path_factory.mktemp("tls")))
    servers = []
    try:
        for _ in range(5):
            servers.append(RedisServer(tls=certs.server()))
        mine = sorted(os.sched_getaffinity(0))
        for srv in servers:
            if sorted(os.sched_getaffinity(srv.pid)) != mine:
                raise RuntimeError(f"redis-server :{srv.port} does not run on CPUs {mine}")
        recorder.meta["tls_servers"] = [
            {"port": srv.port, "tls_port": srv.tls_port, "pid": srv.pid} for srv in servers
        ]
        yield servers, certs
    finally:
        for srv in servers:
            srv.cleanup()


@pytest.mark.parametrize(
    ("n", "lib", "transport"),
    [(n, lib, t) for n, lib in ROWS for t in TRANSPORTS],
    ids=[f"N{n}-{lib}-{t}" for n, lib in ROWS for t in TRANSPORTS],
)
def test_tls_cycle(benchmark, tls_masters, placement, key_prefix, n, lib, transport):
    servers, certs = tls_masters
    benchmark.group = f"TLS N={n} {placement}"
    if transport == "tls":
        cycler = open_cycle(lib, [s.tls_port for s in servers[:n]], f"{key_prefix}:tls", certs.ca)
    else:
        cycler = open_cycle(lib, [s.port for s in servers[:n]], f"{key_prefix}:plain")
    try:
        bench_rounds(
            benchmark,
            cycler.run,
            1,
            {"kind": f"cycle-{transport}", "lib": lib, "n": n, "placement": placement},
        )
        benchmark.extra_info["failures"] = len(cycler.failures)
        benchmark.extra_info["failure_sample"] = cycler.failures[:3]
    finally:
        cycler.close()
