"""Master specifications: URLs (tcp, unix, db, password), dicts, redis-py clients; rl.masters and
rl.quorum; keys land in the selected db."""

from __future__ import annotations

import pytest
import redis
from support import assert_no_key, assert_values


def test_mixed_master_forms(engine, make_redlock, masters5, key):
    a, b, c, d, e = masters5
    masters = [
        a.url,
        f"unix://{b.unixsocket}?db=0",
        {"host": "127.0.0.1", "port": c.port},
        d.client(),
        {"path": e.unixsocket},
    ]
    rl = make_redlock(masters)
    assert rl.quorum == 3
    assert isinstance(rl.masters, tuple) and len(rl.masters) == 5
    names = [str(s) for s in rl.masters]
    assert names[0].startswith("redis://") and str(a.port) in names[0]
    assert names[1].startswith("unix://") and b.unixsocket in names[1]
    lk = rl.lock(key, 5)
    assert lk.acquire(blocking=False)
    assert_values(masters5, key, lk.token)
    lk.extend()
    lk.release()
    assert_no_key(masters5, key)


def test_unix_socket_client(engine, make_redlock, masters5, key):
    cl = redis.Redis(unix_socket_path=masters5[0].unixsocket)
    try:
        rl = make_redlock([cl, masters5[1].url, masters5[2].unix_url])
        lk = rl.lock(key, 5)
        assert lk.acquire(blocking=False)
        assert_values(masters5[:3], key, lk.token)
        lk.release()
        assert_no_key(masters5[:3], key)
    finally:
        cl.close()


@pytest.mark.parametrize("form", ["url", "unix", "dict", "client"])
def test_db_selection(engine, make_redlock, masters5, key, form):
    m = masters5[0]
    master = {
        "url": f"redis://127.0.0.1:{m.port}/3",
        "unix": f"unix://{m.unixsocket}?db=3",
        "dict": {"host": "127.0.0.1", "port": m.port, "db": 3},
        "client": m.client(db=3),
    }[form]
    rl = make_redlock([master])
    lk = rl.lock(key, 5)
    assert lk.acquire(blocking=False)
    db3 = m.client(db=3)
    assert db3.get(key) == lk.token.encode()
    assert m.admin().get(key) is None  # not in db 0
    lk.release()
    assert db3.get(key) is None


def test_default_port_and_db_in_names(engine, make_redlock, masters5):
    rl = make_redlock([f"redis://127.0.0.1:{masters5[0].port}"])
    (spec,) = rl.masters
    assert str(spec).startswith(f"redis://127.0.0.1:{masters5[0].port}")
