"""Which server binary the test fixtures and `hiredlock servers` run: HIREDLOCK_TEST_REDIS_SERVER
(the fixtures' switch) first, then redis-server on PATH, then valkey-server on PATH; the fixtures'
cli is the one beside the server they run."""

from __future__ import annotations

import servers

from hiredlock.cli.servers import find_binary


def fake(folder, name: str, says: str = "") -> str:
    path = folder / name
    path.write_text(f"#!/bin/sh\necho '{says}'\n")
    path.chmod(0o755)
    return str(path)


def test_valkey_server_on_path_is_run_when_no_redis_server_is(tmp_path, monkeypatch):
    valkey = fake(tmp_path, "valkey-server", "Valkey server v=8.0.1 sha=00000000:0")
    valkey_cli = fake(tmp_path, "valkey-cli")
    monkeypatch.setenv("PATH", str(tmp_path))
    assert servers.find_server({}) == (valkey, valkey_cli)
    binary = find_binary()
    assert (binary.path, binary.origin, binary.version) == (valkey, "on PATH", "8.0.1")


def test_redis_server_on_path_comes_before_valkey_server(tmp_path, monkeypatch):
    fake(tmp_path, "valkey-server")
    fake(tmp_path, "valkey-cli")
    redis = fake(tmp_path, "redis-server", "Redis server v=7.2.4 sha=00000000:0")
    redis_cli = fake(tmp_path, "redis-cli")
    monkeypatch.setenv("PATH", str(tmp_path))
    assert servers.find_server({}) == (redis, redis_cli)
    assert find_binary().path == redis


def test_the_environment_variable_wins_and_its_folder_gives_the_cli(tmp_path, monkeypatch):
    chosen = tmp_path / "chosen"
    chosen.mkdir()
    valkey = fake(chosen, "valkey-server")
    valkey_cli = fake(chosen, "valkey-cli")
    fake(tmp_path, "redis-server")
    fake(tmp_path, "redis-cli")
    monkeypatch.setenv("PATH", str(tmp_path))
    environ = {"HIREDLOCK_TEST_REDIS_SERVER": valkey}
    assert servers.find_server(environ) == (valkey, valkey_cli)
