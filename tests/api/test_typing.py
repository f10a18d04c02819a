"""The public API's types, as a user's type checker sees them: `mypy --strict` on a program that
uses both APIs (tests/api/typecheck/user_script.py, with assert_type on what `with` gives, what
lock(fair=True) makes, last_votes, inspect, acquire_many...) finds nothing, and on misspelt options
(tests/api/typecheck/bad_options.py) reports each one, by name, on its line and nowhere else.

Nothing here runs a lock: the types are the same on both engines and no redis-server is needed."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent / "typecheck"
USER_SCRIPT = HERE / "user_script.py"
BAD_OPTIONS = HERE / "bad_options.py"
EXPECTED = re.compile(r"#\s*error:\s*(\w+)\s*$")
REPORTED = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+): error: (?P<message>.*)$")


@pytest.fixture(scope="module")
def mypy_errors(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[int, list[str]]]:
    """mypy --strict over both files, once: {file name: {line: [error messages]}}."""
    cache = tmp_path_factory.mktemp("mypy-cache")
    command = [sys.executable, "-m", "mypy", "--config-file", str(HERE / "mypy.ini")]
    command += ["--no-error-summary", "--cache-dir", str(cache)]
    proc = subprocess.run(
        [*command, str(USER_SCRIPT), str(BAD_OPTIONS)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode in (0, 1), f"mypy failed to run:\n{proc.stdout}{proc.stderr}"
    errors: dict[str, dict[int, list[str]]] = {USER_SCRIPT.name: {}, BAD_OPTIONS.name: {}}
    for line in proc.stdout.splitlines():
        found = REPORTED.match(line)
        if found:
            by_line = errors.setdefault(Path(found["file"]).name, {})
            by_line.setdefault(int(found["line"]), []).append(found["message"])
    return errors


def test_user_script_checks_clean(mypy_errors: dict[str, dict[int, list[str]]]) -> None:
    assert mypy_errors[USER_SCRIPT.name] == {}


def test_misspelt_options_are_type_errors_naming_them(
    mypy_errors: dict[str, dict[int, list[str]]],
) -> None:
    expected = {
        number: found[1]
        for number, text in enumerate(BAD_OPTIONS.read_text().splitlines(), start=1)
        if (found := EXPECTED.search(text))
    }
    assert len(expected) >= 10
    reported = mypy_errors[BAD_OPTIONS.name]
    assert sorted(reported) == sorted(expected), "errors on other lines than the marked ones"
    for number, option in expected.items():
        assert any(f'Unexpected keyword argument "{option}"' in m for m in reported[number]), (
            f"line {number}: {reported[number]}"
        )
