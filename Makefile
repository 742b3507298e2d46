# Two commands set up everything on a fresh machine with Python 3.11+ and make:
#   make demo   creates .venv, installs specdraft, runs the pipeline on the built-in sample
#   make test   the test suite (.ci/run calls exactly this)
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test install lint bench clean wheel-check

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/specdraft demo --out results/demo

test: $(STAMP)
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check specdraft tests

bench: $(STAMP)
	$(BIN)/python -m specdraft.measure.bench

clean:
	rm -rf warehouse/*.duckdb* warehouse/traces warehouse/samples warehouse/tmp results

wheel-check:
	.ci/wheel_check
