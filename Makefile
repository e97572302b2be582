# The two commands of the README. Each sets up what it needs on a fresh machine.
#   make run    the workflow on the bundled test data (config/config.yaml) → results/
#   make test   lint (ruff), the public API's types (mypy) and the test suite (CPU only; GPU
#               tests skip themselves)

PYTHON ?= python3
VENV ?= .venv
BIN := $(CURDIR)/$(VENV)/bin

.PHONY: run test clean

run: $(VENV)/.installed
	PATH="$(BIN):$$PATH" snakemake --cores all

test: $(VENV)/.installed-test
	$(BIN)/ruff check src tests benchmarks workflow
	$(BIN)/ruff format --check src tests benchmarks workflow
	$(BIN)/mypy
	PATH="$(BIN):$$PATH" python -m pytest

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[workflow]'
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $@

clean:
	rm -rf results .snakemake report.html
