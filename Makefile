# The two commands a fresh machine needs: `make serve` and `make test`. Each creates the
# virtual environment .venv and installs fastcoord into it, building the Cython extensions.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: serve test test-ext test-twins test-slow lint bench debug compile clean

$(STAMP): pyproject.toml setup.py $(wildcard _ext/*.pyx _ext/*.pxd _ext/*.h)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip "setuptools>=77" wheel "Cython>=3.0,<4" numpy
	$(BIN)/python -m pip install --quiet -e '.[test,bench]'
	touch $(STAMP)

compile: $(STAMP)  ## rebuild the Cython extensions in place after editing _ext/
	$(BIN)/python setup.py --quiet build_ext --inplace

debug: $(STAMP)  ## line tracing and invariant checks (FASTCOORD_DEBUG_BUILD=1)
	FASTCOORD_DEBUG_BUILD=1 $(BIN)/python setup.py --quiet build_ext --inplace --force

serve: $(STAMP)
	$(BIN)/fastcoord serve

test: $(STAMP) compile lint test-ext test-twins

test-ext: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow"

test-twins: $(STAMP)
	FASTCOORD_NO_EXTENSIONS=1 $(BIN)/python -m pytest -q -m "not slow"

test-slow: $(STAMP) compile  ## long checks (many SIGKILL rounds): CI runs them as a job of their own
	$(BIN)/python -m pytest -q -m slow

lint: $(STAMP)
	$(BIN)/ruff check fastcoord tests benches setup.py
	$(BIN)/ruff format --check fastcoord tests benches setup.py
	$(BIN)/mypy

bench: $(STAMP)  ## asv in the current environment; figures go to docs/benchmarks.md by hand
	$(BIN)/asv run --python=same --quick --show-stderr

clean:
	rm -rf $(VENV) build .asv fastcoord/_ext/*.so
