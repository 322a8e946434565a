# The two commands: `make demo` and `make test`. Each sets up what it needs on a fresh machine.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.gpuburst-installed

.PHONY: setup demo test test-unit bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	@touch $(STAMP)

demo: setup
	$(BIN)/gpuburst demo

test: setup
	$(BIN)/python -m pytest -q -ra

test-unit: setup
	$(BIN)/python -m pytest -q -ra -m "not integration and not browser"

bench: setup
	$(BIN)/gpuburst bench placement --nodes 5000 --pods 50000 --json

clean:
	rm -rf $(VENV) build dist .pytest_cache
