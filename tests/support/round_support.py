"""Helpers of the round tests: DEBUG SLEEP started for sure before the caller goes on,
and the mark for what the python engine does not do yet."""

from __future__ import annotations

import select
import socket
import time


class DebugSleep:
    """DEBUG SLEEP on a raw connection to each given master; returns once every one of them
    provably does not answer (a PING on a new connection gets nothing for 20 ms). finish() waits
    for the sleeps to end."""

    def __init__(self, servers, seconds: float) -> None:
        self.conns = []
        try:
            for srv in servers:
                conn = socket.create_connection((srv.host, srv.port), timeout=10)
                self.conns.append(conn)
                conn.sendall(b"*1\r\n$4\r\nPING\r\n")
                assert conn.recv(64).startswith(b"+PONG")  # registered: served in order now
            text = f"{seconds:g}".encode()
            command = b"*3\r\n$5\r\nDEBUG\r\n$5\r\nSLEEP\r\n$%d\r\n%s\r\n" % (len(text), text)
            for conn in self.conns:
                conn.sendall(command)
            wait_blocked(servers)
        except BaseException:
            self.close()
            raise

    def finish(self) -> None:
        try:
            for conn in self.conns:
                assert conn.recv(64).startswith(b"+OK")
        finally:
            self.close()

    def close(self) -> None:
        for conn in self.conns:
            conn.close()
        self.conns = []


def wait_blocked(servers, timeout: float = 5.0) -> None:
    """Returns once no server of `servers` answers a PING on a new connection within 20 ms (the
    probes run side by side: a short sleep is still running on all of them)."""
    deadline = time.monotonic() + timeout
    waiting = list(servers)
    while waiting:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{waiting} still answer: the DEBUG SLEEP did not start")
        probes = [socket.create_connection((srv.host, srv.port), timeout=1) for srv in waiting]
        try:
            for probe in probes:
                probe.sendall(b"*1\r\n$4\r\nPING\r\n")
            readable, _, _ = select.select(probes, [], [], 0.02)
            waiting = [srv for srv, probe in zip(waiting, probes) if probe in readable]
        finally:
            for probe in probes:
                probe.close()
        if waiting:
            time.sleep(0.001)
