"""Fixtures for the hiredlock test suite.

* Real redis-server processes only (see support/servers.py); a missing redis-server is an error,
  not a skip.
* `engine` runs every API test on both engines.  The native param FAILS when the extension cannot
  be loaded, unless HIREDLOCK_NO_EXTENSIONS=1 (then it is skipped, with the reason).
* `masters5`: five session-wide servers, flushed before every test and revived (SIGCONT /
  restart) after a test that stopped or killed some of them.
* `redis_factory(n)`: n fresh servers for tests that change server configuration.
* `tls_certs`: the TLS tests' certificates (tests/support/tls_support.py); `tls_masters5` and
  `mtls_masters5`: five session-wide servers with a TLS port each (the second five require a
  client certificate), kept like `masters5`.
* A heavy test marked `each_value_once` runs on a cover of its parameter grid where each value
  runs once or more (support/thinning.py; HIREDLOCK_FULL_MATRIX=1 runs every cell).
* The test process's garbage collector does not run automatically inside a test's body (see
  pytest_runtest_call).
"""

from __future__ import annotations

import gc
import os
import sys
import uuid

import pytest

# tests/ (the `faults` package) and tests/support/ (servers, support, apis, ...: imported by name
# from every folder of tests, and by the worker scripts there).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "support"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import servers
import thinning
from servers import Canary, PortTaken, RedisServer
from support import no_extensions

ENGINES = ["native", "python"]


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "slow: long-running test (100k tokens, multi-process contention)"
    )
    config.addinivalue_line("markers", "fork: test calls os.fork() in the pytest process")
    config.addinivalue_line("markers", "subprocess: test runs python subprocesses")
    thinning.pytest_configure(config)
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        # (the fault tests load faults.plugin as they are imported; under pytest-xdist, which
        # `make test` runs, the controlling process imports no test, and needs the plugin to
        # print the scenarios' summary its workers hand over)
        config.pluginmanager.import_plugin("faults.plugin")


def pytest_collection_modifyitems(config, items):
    """Heavy tests marked `each_value_once` run on a cover of their grid (support/thinning.py)."""
    thinning.pytest_collection_modifyitems(config, items)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    """The test process's cyclic garbage collector runs between tests, never inside one. Late in
    the suite the process holds some 150,000 tracked objects and a full collection stops every
    thread for 60-115 ms (measured): longer than the master timeouts (50-100 ms) and latency
    bounds the tests hold the library to, so a collection landing in a test was counted as the
    library's. Explicit gc.collect() calls still work; garbage made by a test is collected by the
    next automatic collection, in a setup or teardown."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


# -- engines --------------------------------------------------------------------------------------


@pytest.fixture(params=ENGINES, ids=ENGINES)
def engine(request) -> str:
    name = request.param
    if name == "native":
        import hiredlock

        if "native" not in hiredlock.available_backends():
            if no_extensions():
                pytest.skip("native engine not built: HIREDLOCK_NO_EXTENSIONS=1")
            try:
                import hiredlock._native
            except Exception as exc:  # ImportError or anything the module raises on import
                pytest.fail(
                    f"the native engine (hiredlock._native) does not load: {exc!r}", pytrace=False
                )
            pytest.fail(
                "hiredlock._native imports but available_backends() does not list 'native'",
                pytrace=False,
            )
    return name


@pytest.fixture
def make_redlock(engine):
    """Build Redlock(..., backend=engine); every instance is closed at teardown."""
    from hiredlock import Redlock

    made = []

    def make(masters, **kw):
        kw.setdefault("backend", engine)
        rl = Redlock(masters, **kw)
        made.append(rl)
        return rl

    yield make
    for rl in made:
        rl.close()


# -- servers --------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def redis_server_bin():
    try:
        return servers.require_redis_server()
    except servers.RedisServerMissing as exc:
        pytest.fail(str(exc), pytrace=False)


class ServerPool:
    def __init__(self, n, **server_options):
        self.server_options = server_options
        self.servers = [RedisServer(**server_options) for _ in range(n)]

    def heal(self):
        for i, srv in enumerate(self.servers):
            if srv.alive and srv.stopped:
                srv.cont()
            if not srv.alive:
                try:
                    srv.restart()
                except PortTaken:
                    srv.cleanup()
                    self.servers[i] = RedisServer(**self.server_options)
            srv = self.servers[i]
            srv.admin().ping()

    def reset(self):
        self.heal()
        for srv in self.servers:
            a = srv.admin()
            a.flushall()
            # Every test starts with no cached script, so the NOSCRIPT -> EVAL path is always
            # exercised on first use (and results don't depend on test order).
            a.script_flush()
            a.config_set("requirepass", "")

    def cleanup(self):
        for srv in self.servers:
            srv.cleanup()


@pytest.fixture(scope="session")
def _pool5(redis_server_bin):
    pool = ServerPool(5)
    yield pool
    pool.cleanup()


@pytest.fixture
def masters5(_pool5):
    """Five running, empty masters (list of RedisServer). Tests may kill/stop them; they are
    revived afterwards.  Tests must not change their configuration (use redis_factory)."""
    _pool5.reset()
    yield list(_pool5.servers)
    _pool5.heal()


@pytest.fixture(scope="session")
def tls_certs(tmp_path_factory):
    """tls_support.Certs: a CA, server certificates (good, expired, for another name), a client
    certificate and an unrelated CA, as PEM files in a session-wide temporary directory."""
    from tls_support import make_certs

    return make_certs(str(tmp_path_factory.mktemp("tls-certs")))


@pytest.fixture(scope="session")
def _tls_pool5(redis_server_bin, tls_certs):
    pool = ServerPool(5, tls=tls_certs.server("good", auth_clients="no"))
    yield pool
    pool.cleanup()


@pytest.fixture(scope="session")
def _mtls_pool5(redis_server_bin, tls_certs):
    pool = ServerPool(5, tls=tls_certs.server("good", auth_clients="yes"))
    yield pool
    pool.cleanup()


@pytest.fixture
def tls_masters5(_tls_pool5):
    """masters5 with a TLS port each (srv.tls_port, srv.tls_url; good certificate for localhost,
    127.0.0.1 and ::1; no client certificate asked for). srv.admin() is on the plaintext port."""
    _tls_pool5.reset()
    yield list(_tls_pool5.servers)
    _tls_pool5.heal()


@pytest.fixture
def mtls_masters5(_mtls_pool5):
    """tls_masters5 whose TLS ports require a client certificate signed by tls_certs.ca
    (--tls-auth-clients yes)."""
    _mtls_pool5.reset()
    yield list(_mtls_pool5.servers)
    _mtls_pool5.heal()


@pytest.fixture
def redis_factory(redis_server_bin):
    started = []

    def start(n=1, **kw):
        new = [RedisServer(**kw) for _ in range(n)]
        started.extend(new)
        return new

    yield start
    for srv in started:
        srv.cleanup()


@pytest.fixture
def key(request):
    """A key name unique to this test run."""
    return f"hl:{request.node.name}:{uuid.uuid4().hex[:8]}"


@pytest.fixture
def canary():
    """A loopback listener no library connection may reach: bad input is refused before any I/O."""
    listener = Canary()
    yield listener
    listener.close()


@pytest.fixture
def canary_redlock(engine, canary):
    """A Redlock whose only master is the canary; at teardown, nothing may have connected to it."""
    from hiredlock import Redlock

    redlock = Redlock([canary.url], backend=engine)
    yield redlock
    redlock.close()
    assert not canary.touched(), "the library connected to a master while refusing bad input"
