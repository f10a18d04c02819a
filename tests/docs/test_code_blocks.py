"""Every code block of README.md and of the docs site runs, against real redis-servers, so a doc
that lies fails the suite (markdown_blocks.py says which blocks run and how a block is marked as
not runnable).

A page's blocks run in order in one namespace, as a reader would type them into one session; it
starts with `redlock` and `masters` (the suite's five servers) and with stand-ins for the reader's
own functions (page_namespace.py). Python blocks run in this process on each engine; bash blocks
run in a shell with HIREDLOCK_MASTERS naming the servers and the engine forced by HIREDLOCK_IMPL.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from markdown_blocks import (
    CODE_LANGUAGES,
    LISTING_LANGUAGES,
    ROOT,
    blocks,
    pages,
    rewrite_addresses,
)
from page_namespace import DEFINED_ONLY, STAND_INS, Calls, namespace

import hiredlock
from hiredlock._engines import selection

if not (ROOT / "docs").is_dir():  # the suite run from an sdist or against a wheel: no docs there
    pytest.skip("no docs/ beside the tests", allow_module_level=True)

PAGES = pages()
RUNNABLE = [page for page in PAGES if any(block.runs for block in blocks(page))]


def _page_id(page):
    return str(page.relative_to(ROOT))


def test_every_block_names_its_language_and_any_reason_not_to_run():
    problems = []
    for page in PAGES:
        for block in blocks(page):
            if block.language not in CODE_LANGUAGES | LISTING_LANGUAGES:
                problems.append(f"{block.where}: language {block.language!r}")
            if block.not_run is not None and block.language not in CODE_LANGUAGES:
                problems.append(f"{block.where}: a {block.language} listing marked not-run")
    assert not problems, "\n".join(problems)


@pytest.fixture
def default_engine(engine, monkeypatch):
    """Redlock(masters) with backend "auto", as the docs write it, picks `engine`."""
    monkeypatch.setattr(selection, "DEFAULT_ENGINE", selection.engine_class(engine))
    return engine


@pytest.mark.parametrize("page", RUNNABLE, ids=_page_id)
def test_the_page_runs(page, default_engine, masters5):
    addresses = [f"{server.host}:{server.port}" for server in masters5]
    urls = [server.url for server in masters5]
    calls = Calls()
    globals_ = namespace(calls)
    globals_["masters"] = urls
    globals_["redlock"] = redlock = hiredlock.Redlock(urls)
    env = {**os.environ, "HIREDLOCK_MASTERS": ",".join(urls), "HIREDLOCK_IMPL": default_engine}
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    named = set()
    try:
        for block in blocks(page):
            if not block.runs:
                continue
            code = rewrite_addresses(block.code, addresses)
            named |= {name for name in STAND_INS if name in code}
            if block.language == "python":
                exec(compile(code, block.where, "exec"), globals_)
            else:
                result = subprocess.run(
                    ["bash", "-euo", "pipefail", "-c", code],
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=60,
                )
                output = result.stdout + result.stderr
                assert result.returncode == 0, f"{block.where}: exit {result.returncode}\n{output}"
    finally:
        redlock.close()
    # The blocks' bodies ran: every stand-in they name was called (the code under the lock).
    assert named - DEFINED_ONLY <= calls.names(), (named - DEFINED_ONLY) - calls.names()
    # ... and nothing was left locked: once the page has run, the masters hold no lock, only the
    # fencing counters meant to outlive every holder.
    for server in masters5:
        left = [
            key
            for key in server.admin().keys("*")
            if not key.startswith(b"hiredlock:fence:") and server.admin().pttl(key) > 0
        ]
        assert left == [], (server.url, left)
