# The README's quick start: `make train` and `make test` each set up .venv on first use.
VENV ?= .venv
PY := $(VENV)/bin/python
# A pinned CPU build of PyTorch installs quickly here; override for other machines, e.g. TORCH=torch.
TORCH ?= torch==2.13.0
EXTRAS ?= dev

.PHONY: setup train test lint bench

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q "$(TORCH)" -e ".[$(EXTRAS)]"
	touch $@

setup: $(VENV)/.installed

train: setup
	$(VENV)/bin/attnkit train reverse

test: setup
	$(PY) -m pytest -q

lint: setup
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks

bench: setup
	$(PY) benchmarks/encoder_block.py
