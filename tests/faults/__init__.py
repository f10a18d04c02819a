"""Reusable fault-injection fixtures for the hiredlock tests (the tests are tests/faults/test_*.py).

    proxy.py     FaultProxy: our own asyncio TCP proxy (a child process), one listener per master,
                 modes pass, latency, blackhole, reset, drop_replies, half_reply
    masters.py   FaultyMasters: redis-servers with fault methods (kill, restart with delay and
                 optional AOF, SIGSTOP/SIGCONT, DEBUG SLEEP, CLIENT PAUSE WRITE, SCRIPT FLUSH), each
                 behind a proxy listener; Fault: one kind of fault applied to masters and healed
    netns.py     NetnsMasters: masters inside a network namespace of our own (root only), with
                 nftables faults inside it
    oracles.py   interval oracle, occupancy / lost-update / fenced-register judges, the
                 read-write judge (RWJudge), the fair lock's order oracle (RequestGate,
                 order_report), leak scan
    worker.py    WorkerPool: persistent client processes that contend for a lock
    scenario.py  Scenario: standard parameters, workloads, checks, summary lines and dumps
    nemesis.py   Nemesis: the soak's fault scheduler (at most 2 masters faulted at once)
    known_bugs.py  the library bugs these tests found, with their analysis and evidence
    plugin.py    the pytest fixtures and the `soak` marker (tests load it with
                 `pytest_plugins = ["faults.plugin"]`)

Nothing here is imported at package import: workers import only what they need.
"""
