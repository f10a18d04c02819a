"""Redlock(namespace=...): every key and channel the library writes or reads starts with the
namespace, so that an ACL user limited to it (~billing:* &billing:*) can use every kind, and two
applications' names never collide."""

from __future__ import annotations

import re
import socket
import threading

import pytest
from apis import make_redlock_fixture, pytest_generate_tests, rwlock  # noqa: F401
from cli_support import cli, env, masters
from layout_support import exercise_every_kind
from servers import RedisServer
from support import urls

from hiredlock import HiredlockError, Redlock

PASSWORD = "billing-secret"


@pytest.fixture(scope="module")
def billing_servers(redis_server_bin):
    """Three masters, each with a user `billing` allowed only keys and channels under
    "billing:"."""
    servers = [RedisServer() for _ in range(3)]
    for server in servers:
        server.admin().execute_command(
            "ACL", "SETUSER", "billing", "on", f">{PASSWORD}", "~billing:*", "&billing:*", "+@all"
        )
    yield servers
    for server in servers:
        server.cleanup()


def billing_urls(servers) -> list[str]:
    return [f"redis://billing:{PASSWORD}@127.0.0.1:{server.port}/0" for server in servers]


class Published:
    """Every channel the scripts on a server published a release on (SPUBLISH, or PUBLISH)
    while it was watched: MONITOR shows the commands that scripts run, as lines like
    `+1764000000.000000 [0 lua] "spublish" "<channel>" ""`."""

    def __init__(self, server) -> None:
        options = server.admin().connection_pool.connection_kwargs
        self._sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        login = b""
        if options.get("password") is not None:
            words = [options.get("username") or "default", options["password"]]
            login = b"AUTH " + " ".join(words).encode() + b"\r\n"
        self._sock.sendall(login + b"MONITOR\r\n")
        answer = b""
        while answer.count(b"\r\n") < (2 if login else 1):
            answer += self._sock.recv(4096)
        assert answer.endswith(b"+OK\r\n"), answer

    def close(self) -> list[bytes]:
        self._sock.settimeout(0.5)
        data = b""
        try:
            while chunk := self._sock.recv(65536):
                data += chunk
        except socket.timeout:
            pass
        self._sock.close()
        return [
            found.group(1)
            for found in re.finditer(rb'\[\d+ lua\] "s?publish" "((?:[^"\\]|\\.)*)"', data, re.I)
        ]


def test_every_kind_works_for_a_user_limited_to_its_namespace(api, make_redlock, billing_servers):
    rl = make_redlock(billing_urls(billing_servers), namespace="billing:")
    assert rl.namespace == b"billing:"
    heard = Published(billing_servers[0])
    for name in ("orders", "{user1}:cart", "a}b"):
        exercise_every_kind(rl, name)
    channels = heard.close()
    assert channels, "no release was announced"
    assert all(channel.startswith(b"billing:hiredlock:released:") for channel in channels), channels


def test_every_key_held_is_under_the_namespace(api, make_redlock, billing_servers):
    rl = make_redlock(billing_urls(billing_servers), namespace="billing:")
    held = [
        rl.lock("one", 10, fencing=True),
        rl.lock("two", 10, fair=True),
        rwlock(rl, "three", 10).read(),
    ]
    for lock in held:
        assert lock.acquire(blocking=False), lock.last_votes
    permit = rl.semaphore("four", 2, 10).acquire(blocking=False)
    assert permit is not None
    assert held[0].key == b"billing:one"
    for server in billing_servers:
        keys = server.admin().keys("*")
        assert len(keys) >= 6, keys  # (the lock, its fence, the fair lock and its queue, ...)
        assert all(key.startswith(b"billing:") for key in keys), keys
    for lock in (*held, permit):
        lock.release()
    rl.delete_fence_counter("one")
    assert all(server.admin().keys("*") == [] for server in billing_servers)


def test_without_the_namespace_the_acl_refuses(api, make_redlock, billing_servers):
    """The ACL is what the namespace is for: outside it the same user is refused."""
    rl = make_redlock(billing_urls(billing_servers))
    with pytest.raises(HiredlockError, match="NOPERM"):
        rl.lock("orders", 10).acquire(blocking=False)


def test_a_waiter_is_woken_on_the_namespaced_channel(make_redlock, billing_servers):
    """A waiter subscribes to its name's channel in the namespace (the ACL allows no other):
    the holder's release wakes it long before its retry timer."""
    holder = make_redlock(billing_urls(billing_servers), namespace="billing:")
    waiter = make_redlock(billing_urls(billing_servers), namespace="billing:", retry_delay=30)
    lock = holder.lock("woken", 30)
    assert lock.acquire(blocking=False)
    got: list[bool] = []
    waiting = waiter.lock("woken", 30)
    thread = threading.Thread(target=lambda: got.append(waiting.acquire()))
    thread.start()
    channel = b"billing:hiredlock:released:{billing:woken}"
    admin = billing_servers[0].admin()
    for _ in range(200):
        if channel in admin.pubsub_shardchannels():
            break
        thread.join(0.05)
    assert channel in admin.pubsub_shardchannels(), admin.pubsub_shardchannels()
    lock.release()
    thread.join(10)  # (its timer would wake it only after 30 s and more)
    assert got == [True]
    waiting.release()


def test_two_namespaces_never_collide(api, make_redlock, masters5, key):
    """One name, held at once as every kind under two namespaces and none."""
    clients = [make_redlock(urls(masters5), namespace=space) for space in ("a:", b"b:", None)]
    held = []
    for rl in clients:
        for lock in (
            rl.lock(key, 10, fencing=True),
            rl.lock(key + ":fair", 10, fair=True),
            rwlock(rl, key + ":rw", 10).write(),
            rl.multilock([key + ":m1", key + ":m2"], 10),
        ):
            assert lock.acquire(blocking=False), (rl.namespace, lock)
            held.append(lock)
        permit = rl.semaphore(key + ":sem", 1, 10).acquire(blocking=False)
        assert permit is not None, rl.namespace
        held.append(permit)
    assert [lock.fence for lock in held[::5]] == [held[0].fence] * 3  # (a counter each)
    assert {lock.key for lock in held[::5]} == {
        b"a:" + key.encode(),
        b"b:" + key.encode(),
        key.encode(),
    }
    for lock in held:
        lock.release()
    for rl in clients:
        rl.delete_fence_counter(key)


@pytest.mark.parametrize(
    ("namespace", "error", "match"),
    [
        (5, TypeError, "namespace must be str, bytes or None, not int"),
        (bytearray(b"x:"), TypeError, "namespace must be str, bytes or None"),
        ("{app", ValueError, "namespace '{app' has a '{' that opens no hash tag"),
        ("{}app:", ValueError, "opens no hash tag"),
        ("a{b:", ValueError, "opens no hash tag"),
        ("hiredlock:fence:", ValueError, "namespace must not start with 'hiredlock:fence:'"),
        ("x\ud800", ValueError, "namespace must be valid Unicode"),
    ],
)
def test_a_bad_namespace_is_refused_before_any_io(
    api, make_redlock, canary, namespace, error, match
):
    with pytest.raises(error, match=match):
        make_redlock([canary.url], namespace=namespace)
    assert not canary.touched()


def test_cli_status_and_unlock_take_the_namespace(engine, masters5, key):
    """--namespace (or HIREDLOCK_NAMESPACE) makes status and unlock read the namespace's keys."""
    with Redlock(urls(masters5), backend=engine, namespace="billing:") as holder:
        permit = holder.semaphore(key, 2, 60).acquire(blocking=False)
        assert permit is not None
        proc = cli("status", key, *masters(masters5), "--namespace", "billing:")
        assert proc.returncode == 0, proc.stderr
        assert "1 permit held by a majority" in proc.stdout, proc.stdout
        plain = cli("status", key, *masters(masters5))
        assert plain.returncode == 1, plain.stdout  # (outside the namespace: not held)
        proc = cli(
            "unlock", key, "--yes", *masters(masters5), environ=env(HIREDLOCK_NAMESPACE="billing:")
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.count(f"billing:hiredlock:permit:*:{{billing:{key}}} (1)") == 5
        assert all(server.admin().keys(f"billing:*{key}*") == [] for server in masters5)


def test_cli_refuses_a_bad_namespace(masters5, key):
    proc = cli("status", key, *masters(masters5), "--namespace", "{open")
    assert proc.returncode == 2
    assert "--namespace (or $HIREDLOCK_NAMESPACE): namespace '{open' has a '{'" in proc.stderr
