"""A Redis Cluster given as one master: redis+cluster:// and rediss+cluster:// URLs, dicts with
`cluster`, redis-py RedisCluster clients; what is refused, before any I/O, naming the master; and
that no engine takes a cluster as if it were one server."""

from __future__ import annotations

import ssl

import pytest
import redis
import redis.cluster
from apis import api_fixture, both_apis, make_redlock_fixture  # noqa: F401
from clusters import cluster_fixture  # noqa: F401  (fixtures)

from hiredlock._core.masters import MasterSpec, parse_masters
from hiredlock._core.places import ClusterGroup

A, B = "127.0.0.1:7000", "10.0.0.2:7001"


def test_url_names_the_seeds():
    (spec,) = parse_masters([f"redis+cluster://{A},{B}"])
    assert spec.cluster == ClusterGroup((("127.0.0.1", 7000), ("10.0.0.2", 7001)))
    assert spec.host is None and spec.path is None and spec.db == 0 and spec.tls is None
    assert str(spec) == f"redis+cluster://{A},{B}"
    assert spec.identity() == ("cluster", frozenset({("127.0.0.1", 7000), ("10.0.0.2", 7001)}))


def test_url_login_tls_and_default_port(tls_certs):
    url = (
        f"rediss+cluster://user:p%40ss@{A},[::1]:7002,node3/0"
        f"?ssl_ca_certs={tls_certs.ca}&ssl_check_hostname=false"
    )
    (spec,) = parse_masters([url])
    assert spec.cluster.seeds == (("127.0.0.1", 7000), ("::1", 7002), ("node3", 6379))
    assert (spec.username, spec.password) == ("user", "p@ss")
    assert spec.tls is not None and spec.tls.context.verify_mode == ssl.CERT_REQUIRED
    assert str(spec) == f"rediss+cluster://{A},[::1]:7002,node3:6379"
    assert "p@ss" not in repr(spec) and "p@ss" not in str(spec)


def test_dict_forms():
    (pairs, texts) = parse_masters(
        [
            {"cluster": [("127.0.0.1", 7000), ("10.0.0.2", "7001")], "password": "pw"},
            {"cluster": ["127.0.0.9:7000"], "username": "u", "password": "pw", "db": 0},
        ]
    )
    assert pairs.cluster.seeds == (("127.0.0.1", 7000), ("10.0.0.2", 7001))
    assert pairs.password == "pw" and texts.username == "u"
    assert texts.cluster.seeds == (("127.0.0.9", 7000),)


def test_the_same_seeds_in_another_order_are_the_same_master():
    with pytest.raises(ValueError, match=r"masters\[1\] duplicates masters\[0\]"):
        parse_masters([f"redis+cluster://{A},{B}", {"cluster": [B, A.upper()]}])


def test_a_cluster_and_plain_masters_are_separate_places():
    specs = parse_masters([f"redis+cluster://{A}", f"redis://{A}/0"])
    assert specs[0].identity() != specs[1].identity()


def test_redis_cluster_client(cluster):
    client = redis.cluster.RedisCluster(host="127.0.0.1", port=cluster.servers[0].port)
    try:
        (spec,) = parse_masters([client])
    finally:
        client.close()
    # the nodes the client knows: every primary (and the replicas it was told of)
    primaries = {("127.0.0.1", srv.port) for srv in cluster.primaries()}
    assert primaries <= set(spec.cluster.seeds) <= set(cluster.seeds)
    assert spec.password is None and spec.tls is None


def test_redis_cluster_client_credentials_and_tls_options(cluster, tls_certs):
    # the options are read, never used to connect (no TLS on this cluster's ports)
    client = redis.cluster.RedisCluster(
        host="127.0.0.1", port=cluster.servers[0].port, username="default", password=None
    )
    try:
        kwargs = client.get_connection_kwargs()
        kwargs.update(password="hunter2", ssl=True, ssl_ca_certs=tls_certs.ca)
        (spec,) = parse_masters([{"cluster": client}])
    finally:
        client.close()
    assert spec.username == "default" and spec.password == "hunter2"
    assert spec.tls is not None and str(spec).startswith("rediss+cluster://")


# -- bad input, refused before any I/O ------------------------------------------------------------

BAD_VALUE = [
    pytest.param("redis+cluster://", id="url-no-node"),
    pytest.param("redis+cluster://,/", id="url-empty-node-list"),
    pytest.param("redis+cluster://127.0.0.1:port", id="url-port-not-a-number"),
    pytest.param("redis+cluster://127.0.0.1:70000", id="url-port-out-of-range"),
    pytest.param(f"redis+cluster://{A}/1", id="url-db-1"),
    pytest.param(f"redis+cluster://{A}?db=2", id="url-query-db-2"),
    pytest.param(f"redis+cluster://{A}/0/1", id="url-two-segments"),
    pytest.param(f"redis+cluster://{A}?bogus=1", id="url-unknown-parameter"),
    pytest.param(f"redis+cluster://{A}?ssl_ca_certs=/x", id="url-tls-parameter-without-tls"),
    pytest.param({"cluster": []}, id="dict-no-node"),
    pytest.param({"cluster": ["127.0.0.1:0"]}, id="dict-port-zero"),
    pytest.param({"cluster": [":7000"]}, id="dict-empty-host"),
    pytest.param({"cluster": [("127.0.0.1",)]}, id="dict-1-tuple"),
    pytest.param({"cluster": [A], "db": 3}, id="dict-db-3"),
    pytest.param({"cluster": [A], "host": "127.0.0.1"}, id="dict-host"),
    pytest.param({"cluster": [A], "port": 7000}, id="dict-port"),
    pytest.param({"cluster": [A], "path": "/tmp/r.sock"}, id="dict-path"),
    pytest.param({"cluster": [A], "sentinels": [A], "service_name": "m"}, id="dict-sentinels"),
    pytest.param({"cluster": [A], "service_name": "m"}, id="dict-service-name"),
    pytest.param({"cluster": [A], "ssl_ca_certs": "/x"}, id="dict-tls-option-without-ssl"),
    pytest.param({"cluster": [A], "bogus": 1}, id="dict-unknown-key"),
]

BAD_TYPE = [
    pytest.param({"cluster": A}, id="dict-cluster-a-str"),
    pytest.param({"cluster": 7000}, id="dict-cluster-an-int"),
    pytest.param({"cluster": [A], "password": 5}, id="dict-password-an-int"),
    pytest.param({"cluster": [A], "ssl": "yes"}, id="dict-ssl-a-str"),
]


@both_apis
@pytest.mark.parametrize("bad", BAD_VALUE)
def test_bad_cluster_master_value(engine, api, make_redlock, canary, bad):
    with pytest.raises(ValueError) as caught:
        make_redlock([canary.url, bad])
    assert "masters[1]" in str(caught.value), caught.value
    assert not canary.touched(), "the library connected somewhere while refusing bad input"


@both_apis
@pytest.mark.parametrize("bad", BAD_TYPE)
def test_bad_cluster_master_type(engine, api, make_redlock, canary, bad):
    with pytest.raises(TypeError) as caught:
        make_redlock([canary.url, bad])
    assert "masters[1]" in str(caught.value), caught.value
    assert not canary.touched(), "the library connected somewhere while refusing bad input"


def test_bad_cluster_url_hides_the_password(engine, make_redlock, canary):
    with pytest.raises(ValueError) as caught:
        make_redlock([canary.url, f"redis+cluster://u:hunter2@{A}?bogus=1"])
    text = str(caught.value)
    assert "masters[1]" in text and "hunter2" not in text, text
    assert not canary.touched()


@both_apis
def test_a_client_of_a_cluster_does_no_io_until_its_first_round(engine, api, make_redlock, canary):
    # (the slot map is asked for with the first engine, not by the constructor)
    make_redlock([canary.url, f"redis+cluster://127.0.0.1:{canary.port}"])
    assert not canary.touched()


def test_spec_repr_names_the_cluster_only_when_set():
    assert "cluster=" not in repr(MasterSpec(host="h"))
    (spec,) = parse_masters([f"redis+cluster://:pw@{A}"])
    assert "cluster=ClusterGroup" in repr(spec) and "pw" not in repr(spec).replace("password", "")
