# Every target works on a fresh Debian/Ubuntu machine: `make deps` installs what is missing.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
APT_PACKAGES := redis-server libhiredis-dev pkg-config build-essential python3-dev python3-venv

.PHONY: deps venv install test test-native test-python lint demo clean

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

# The package with its native engine; a failed extension build is an error here.
install: deps venv
	$(PY) -m pip install -q "setuptools>=77" "Cython>=3" wheel
	HIREDLOCK_REQUIRE_EXTENSIONS=1 $(PY) -m pip install -q --no-build-isolation -e ".[dev]"

# The test command: every API test runs on both engines, against real redis-servers.
test: install
	$(PY) -m pytest -q tests

lint: install
	$(VENV)/bin/ruff check src tests examples setup.py
	$(VENV)/bin/ruff format --check src tests examples setup.py
	$(VENV)/bin/cython-lint _native

# The main job: the ticket race on 5 local masters started and stopped by the demo itself.
demo: install
	$(PY) examples/ticket_race.py

clean:
	rm -rf build dist *.egg-info src/*.egg-info src/hiredlock/*.so _native/*.c .pytest_cache
