"""Registers the `soak` marker for runs that collect this directory (the fault tests also load
faults.plugin, which registers it as well)."""


def pytest_configure(config):
    config.addinivalue_line("markers", "soak: tier-2 fault-injection soak test (make soak)")
