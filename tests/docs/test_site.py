"""README is also the package's page on PyPI, where a relative link leads nowhere: its links are
absolute, and those into the docs site or the repository name pages and files that exist. The API
reference lists every public name. (mkdocs build --strict, `make docs`, checks the site's own
links.)"""

from __future__ import annotations

import hashlib
import re

import pytest
from markdown_blocks import DOCS, README, ROOT

import hiredlock
import hiredlock.aio
import hiredlock.testing

if not DOCS.is_dir():  # the suite run from an sdist or against a wheel: no docs there
    pytest.skip("no docs/ beside the tests", allow_module_level=True)

SITE = "https://hiredlock.readthedocs.io/"
SITE_PAGES = SITE + "en/latest/"
REPOSITORY = "https://github.com/hiredlock/hiredlock/"
LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")
BARE_URL = re.compile(r"(?<![(<])\bhttps?://[^\s)>`*]+")


def _readme_links() -> list[str]:
    text = README.read_text(encoding="utf-8")
    return LINK.findall(text) + BARE_URL.findall(text)


def test_readme_links_are_absolute():
    relative = [target for target in _readme_links() if not target.startswith("https://")]
    assert relative == []


def test_readme_links_into_the_site_name_its_pages():
    missing = []
    for target in _readme_links():
        if not target.startswith(SITE_PAGES):
            continue
        page = target[len(SITE_PAGES) :].split("#")[0].strip("/")
        if not page:
            continue
        if not ((DOCS / f"{page}.md").is_file() or (DOCS / page / "index.md").is_file()):
            missing.append(target)
    assert missing == []


def test_readme_links_into_the_repository_name_its_files():
    missing = []
    for target in _readme_links():
        match = re.match(re.escape(REPOSITORY) + r"(?:blob|tree)/main/(?P<path>[^#]+)", target)
        if match and not (ROOT / match.group("path")).exists():
            missing.append(target)
    assert missing == []


def test_readme_has_no_image_pypi_could_not_show():
    images = re.findall(r"!\[[^\]]*\]\((?P<target>[^)]+)\)", README.read_text(encoding="utf-8"))
    assert [image for image in images if not image.startswith("https://")] == []


def test_the_performance_page_shows_the_benchmarks_own_chart():
    """docs/assets/bench.png is a copy of what `make bench` writes (bench/results/bench.png)."""
    # (digests compared: pytest's diff of two differing PNGs' bytes runs for minutes)
    chart = hashlib.sha256((ROOT / "bench" / "results" / "bench.png").read_bytes()).hexdigest()
    shown = hashlib.sha256((DOCS / "assets" / "bench.png").read_bytes()).hexdigest()
    assert shown == chart, "copy bench/results/bench.png to docs/assets/bench.png"


@pytest.mark.parametrize("module", [hiredlock, hiredlock.aio, hiredlock.testing])
def test_the_reference_lists_every_public_name(module):
    reference = "\n".join(path.read_text() for path in (DOCS / "reference").glob("*.md"))
    listed = set(re.findall(r"^::: (\S+)$", reference, flags=re.M))
    public = {f"{module.__name__}.{name}" for name in module.__all__ if name != "__version__"}
    assert sorted(public - listed) == []
