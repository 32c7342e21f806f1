# The two commands of the README: `make run` and `make test`. Each creates or reuses .venv and
# installs the project with its dev extras, so both work on a fresh machine with nothing set up.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run demo test lint bench clean test-packages

# Reinstall when the packaging, a .proto or a .pyx changes: setup.py regenerates quotaplane.v1 from protos/ and
# compiles the Cython hot paths (quotaplane/**/*.pyx).
$(STAMP): pyproject.toml setup.py $(wildcard protos/quotaplane/v1/*.proto) $(wildcard quotaplane/*/*.pyx quotaplane/*/*/*.pyx)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/quotaplane up

demo: $(STAMP)
	$(BIN)/quotaplane demo

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# Debian packages the tests drive for real (each installs in seconds and starts nothing by itself): a Prometheus
# server for the metrics tests, headless Chromium for the HTML report's screenshot, tmux for `quotaplane top`.
DEBIAN_TEST_PACKAGES := prometheus chromium tmux
test-packages:
	@command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1 \
	  && command -v chromium >/dev/null 2>&1 && command -v tmux >/dev/null 2>&1 || { \
	  sudo=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq $(DEBIAN_TEST_PACKAGES) >/dev/null; }

# The suite on TEST_WORKERS processes (pytest-xdist), whole modules to a worker, so a module's clusters start once.
# On the 2-core machine: 21.6 min of pytest against 26.8 in one process. TEST_WORKERS=0 runs it in this process.
TEST_WORKERS ?= 2
test: lint test-packages
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile

bench: $(STAMP)
	$(BIN)/python bench/core_quota.py
	$(BIN)/python bench/producer_ids.py
	$(BIN)/python bench/telemetry.py
	$(BIN)/python bench/eventlog.py
	$(BIN)/python bench/cluster_quota.py
	$(BIN)/python bench/proxy.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
