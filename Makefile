# Every target works on a fresh Debian/Ubuntu machine: `make deps` installs what is missing.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
APT_PACKAGES := redis-server libhiredis-dev pkg-config build-essential python3-dev python3-venv

.PHONY: deps venv install test test-native test-python lint demo docs clean

# System packages: installed with apt only when missing (sudo when not root).
deps:
	@missing=""; \
	command -v redis-server >/dev/null || missing="$$missing redis-server"; \
	pkg-config --exists hiredis 2>/dev/null || missing="$$missing libhiredis-dev pkg-config"; \
	command -v cc >/dev/null || missing="$$missing build-essential"; \
	$(PYTHON) -c "import ensurepip, sysconfig, os; \
	  assert os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h'))" \
	  2>/dev/null || missing="$$missing python3-dev python3-venv"; \
	if [ -n "$$missing" ]; then \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -q && $$SUDO apt-get install -y -q $(APT_PACKAGES); \
	fi

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

venv: $(PY)

# The package with its native engine and the hot path's modules compiled from their .py
# (HIREDLOCK_NO_COMPILE=1 make install: those run as .py); a failed extension build is an error here.
install: deps venv
	$(PY) -m pip install -q "setuptools>=77" "Cython>=3.1" wheel
	HIREDLOCK_REQUIRE_EXTENSIONS=1 $(PY) -m pip install -q --no-build-isolation -e . --group dev

# The test command: every API test runs on both engines, against real redis-servers; the fault
# scenarios on the pairwise cover of engine x API x fault (half the matrix: tests/faults/plugin.py),
# the tests marked each_value_once on a cover of their grid (tests/support/thinning.py).
# PYTEST_ARGS replaces `tests` (CI leaves out tests/sim here: its uncompiled tier runs it).
# TEST_WORKERS: test processes (pytest-xdist; 0: the suite in one process). Most of a test's time
# is spent waiting on servers, so two halve the suite's time on two CPUs; more would load a small
# machine past the few-ms bounds some tests hold the library to.
PYTEST_ARGS ?= tests
TEST_WORKERS ?= 2
test: install
	$(PY) -m pytest -q -n $(TEST_WORKERS) $(PYTEST_ARGS)

# Every cell of the fault matrix and of the each_value_once grids too, and the whole random-interrupt
# campaigns (about 7 minutes more).
.PHONY: test-full
test-full: install
	HIREDLOCK_FULL_MATRIX=1 $(PY) -m pytest -q -n $(TEST_WORKERS) $(PYTEST_ARGS)

lint: install
	$(VENV)/bin/ruff check src tests tools sim bench examples setup.py
	$(VENV)/bin/ruff format --check src tests tools sim bench examples setup.py
	# cython-lint runs pycodestyle as a command: the venv's, found on PATH
	PATH="$(abspath $(VENV))/bin:$$PATH" $(VENV)/bin/cython-lint _native $(wildcard src/hiredlock/*.pxd src/hiredlock/*/*.pxd)
	# mypy --strict over src/ ([tool.mypy] in pyproject.toml)
	$(VENV)/bin/mypy

# The main job: the ticket race on 5 local masters started and stopped by the demo itself.
# "hiredlock[cli]" adds the cli extra (rich) to the package `install` just built, without a rebuild.
demo: install
	$(PY) -m pip install -q "hiredlock[cli]"
	$(VENV)/bin/hiredlock demo

# The documentation site (mkdocs.yml, docs/): the docs dependency group, then a strict build into
# site/ (a broken link or a reference that does not resolve fails it).
docs: install
	$(PY) -m pip install -q --group docs
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

clean:
	rm -rf site build dist *.egg-info src/*.egg-info src/hiredlock/*.so src/hiredlock/*/*.so \
	  src/hiredlock/_compiled.json _native/*.c .pytest_cache

# Benchmarks (bench/): the bench extra (pytest-benchmark, the peers) and matplotlib, valgrind (for
# instruction counts; best effort), the C reference built from bench/cref.c, redlock-ng in a venv
# of its own (it installs a package named `redlock`, as redlock-py does), then both placements;
# writes bench/results/REPORT.md and bench.png. About 15 minutes on 2 CPUs. BENCH_ARGS go to
# bench/run.py (e.g. BENCH_ARGS="--placements unpinned").
.PHONY: bench
bench: install
	$(PY) -m pip install -q --group bench --group plot
	@command -v valgrind >/dev/null || { SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  { $$SUDO apt-get update -q && $$SUDO apt-get install -y -q valgrind; } >/dev/null 2>&1 \
	  || echo "valgrind could not be installed: no instruction counts"; }
	mkdir -p bench/build
	cc -O2 -Wall -o bench/build/cref bench/cref.c $$(pkg-config --cflags --libs hiredis)
	cc -O2 -Wall -shared -fPIC -DCREF_LIB -o bench/build/libcref.so bench/cref.c \
	  $$(pkg-config --cflags --libs hiredis)
	test -x bench/.venv-redlock-ng/bin/python || $(PYTHON) -m venv bench/.venv-redlock-ng
	bench/.venv-redlock-ng/bin/python -m pip install -q redlock-ng \
	  || echo "redlock-ng could not be installed: its contention row is skipped"
	test -x bench/.venv-hiredis/bin/python || $(PY) -m venv bench/.venv-hiredis
	bench/.venv-hiredis/bin/python -m pip install -q hiredis \
	  "redis==$$($(PY) -c 'from importlib.metadata import version; print(version("redis"))')" \
	  || echo "bench/.venv-hiredis could not be set up: the redis-py hiredis rows are skipped"
	$(PY) bench/run.py $(BENCH_ARGS)

# Packaging (docs/internals/wheels.md): sdist, wheel built from the sdist, auditwheel repair, the test suite
# against the installed manylinux wheel with the system libhiredis hidden, and the sdist without
# hiredis headers. As root (mount namespaces); needs PyPI only. WHEEL_CHECK_PYTEST_ARGS selects tests.
.PHONY: wheel-check
wheel-check: deps
	PYTHON=$(PYTHON) bash tools/wheel_check.sh

# Tier-2 fault-injection soak (tests/faults/test_soak.py, marker `soak`; skipped by `make test`):
# 10,000 contended acquisitions under a nemesis, then the same with the masters in a network
# namespace (root only: nftables is installed when missing; elsewhere that test is skipped with
# the reason), then every lock kind at once under the nemesis (2,000 calls per kind). About 5 to
# 15 minutes. SOAK_ARGS go to pytest (e.g. SOAK_ARGS="-k nemesis"); SOAK_CALLS / SOAK_NETNS_CALLS
# / SOAK_KINDS_CALLS change the counts; failures dump to $$TMPDIR/hiredlock-fault-dumps.
.PHONY: soak
soak: install
	@if [ "$$(id -u)" = 0 ] && ! command -v nft >/dev/null; then \
	  { apt-get update -q && apt-get install -y -q nftables; } >/dev/null 2>&1 \
	  || echo "nftables could not be installed: the network-namespace soak will be skipped"; \
	fi
	HIREDLOCK_SOAK=1 $(PY) -m pytest -q -rA -m soak tests $(SOAK_ARGS)

# The compiled code under valgrind's memcheck (tools/memcheck.py): tests of the native engine's
# paths where a C index can go wrong (a cluster's MOVED and ASK, batched scripts), failing on any
# invalid read or write, or use of an uninitialised value, in hiredlock's code. valgrind is
# installed when missing. MEMCHECK_ARGS replaces the tests (pytest arguments).
MEMCHECK_ARGS ?= -k native tests/engine/test_cluster_routing.py tests/engine/test_batched_scripts.py
.PHONY: memcheck
memcheck: install
	@command -v valgrind >/dev/null || { SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -q && $$SUDO apt-get install -y -q valgrind; }
	$(PY) tools/memcheck.py $(MEMCHECK_ARGS)

# The deterministic simulation (sim/): SIM_LIFETIMES lock lifetimes from seed SIM_SEED, with a
# progress bar and a summary of what was exercised; exits 1 on a violated invariant, printing the
# seed that replays it. Runs the library as installed in this tree (`make install`).
SIM_LIFETIMES ?= 1000000
SIM_SEED ?= 0
.PHONY: sim
sim: install
	$(PY) -m sim --lifetimes $(SIM_LIFETIMES) --seed $(SIM_SEED)
