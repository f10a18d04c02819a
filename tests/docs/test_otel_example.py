"""The observability page's OpenTelemetry example runs (it is marked not-run on the page: it sets
OpenTelemetry's process-wide providers, so it runs here in a process of its own)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from markdown_blocks import ROOT

if not (ROOT / "docs").is_dir():  # the suite run from an sdist or against a wheel: no docs there
    pytest.skip("no docs/ beside the tests", allow_module_level=True)


def test_the_docs_example_runs(masters5):
    """The observability page's OpenTelemetry example, on a real master, in a process of its own
    (it sets the process-wide providers): it prints its spans and metrics."""
    page = (ROOT / "docs" / "observability.md").read_text()
    section = page.split("\n## OpenTelemetry\n", 1)[1]
    example = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert "redis://10.0.0.1:6379/0" in example
    example = example.replace("redis://10.0.0.1:6379/0", masters5[0].url)
    result = subprocess.run(
        [sys.executable, "-c", example], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert '"name": "hiredlock.acquire"' in result.stdout, result.stdout
    assert '"name": "hiredlock.release"' in result.stdout
    assert "'hiredlock.lock.hold.duration'" in result.stdout
