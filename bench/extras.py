"""Prints the requirements of pyproject.toml's optional-dependency groups named on the command line,
one per line, for `pip install` (so `make bench` installs the bench extra without rebuilding the
package). Usage: python bench/extras.py bench plot"""

from __future__ import annotations

import os
import sys

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
    extras = tomllib.load(f)["project"]["optional-dependencies"]
for group in sys.argv[1:]:
    for requirement in extras[group]:
        print(requirement)
