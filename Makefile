# Two commands set up everything on a fresh machine with Python 3.11+ and make:
#   make demo   creates .venv, installs specdraft, runs the pipeline on the built-in sample
#   make test   the test suite (.ci/run calls exactly this)
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test install lint bench clean wheel-check

# The test extra brings torch (the transformers integration's tests). It comes first from PyTorch's
# CPU wheel index (about 200 MB) because PyPI's Linux wheel pulls about 5 GB of CUDA libraries the
# tests have no use for; --retries 0 so that where the index cannot be reached pip moves on at once
# (to its configured index, or failing that to the next line, which takes torch from PyPI).
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --retries 0 --index-url $(TORCH_INDEX) 'torch>=2.2' \
	  || echo "make: torch not installed from $(TORCH_INDEX); the next step takes it from pip's index" >&2
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
	rm -rf warehouse/*.duckdb* warehouse/traces warehouse/samples warehouse/tmp results build *.egg-info

wheel-check:
	.ci/wheel_check
