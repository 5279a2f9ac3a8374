# The README's quick start: `make train` and `make test` each set up .venv on first use.
VENV ?= .venv
PY := $(VENV)/bin/python
# A pinned CPU build of PyTorch installs quickly here; override for other machines, e.g. TORCH=torch.
TORCH ?= torch==2.13.0
EXTRAS ?= dev

.PHONY: setup browser postgres train test lint bench docs

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q "$(TORCH)" -e ".[$(EXTRAS)]"
	touch $@

setup: $(VENV)/.installed

train: setup
	$(VENV)/bin/attnkit train reverse

# The run report is checked in a real browser: Debian's chromium, installed here when missing
# (as root, with apt-get); elsewhere that one test says why it cannot run.
browser:
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || \
	{ if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing Debian's chromium for the report test"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "note: no chromium found and cannot install it; the browser test of report.html will not run"; fi; }

# The shared tuning study is tested against a real PostgreSQL server: Debian's packages, installed
# here when missing (as root, with apt-get); the test starts a throw-away server on 127.0.0.1 from
# them and stops it. Elsewhere that one test says why it cannot run.
postgres:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null || \
	{ if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing Debian's postgresql for the shared tuning study test"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; \
	  else echo "note: no PostgreSQL found and cannot install it; the shared-study test on PostgreSQL will not run"; fi; }

# The test suite; tests/docs also builds the documentation site (executing every tutorial notebook)
# and opens each of its pages in headless Chromium.
test: setup browser postgres
	$(PY) -m pytest -q

# The documentation site, built offline with warnings as errors (every tutorial is executed on the
# way), then every page opened in headless Chromium. Open build/docs/html/index.html.
docs: setup browser
	$(PY) -m sphinx -W --keep-going -b html docs build/docs/html -d build/docs/doctrees
	$(PY) docs/check_site.py build/docs/html

lint: setup
	$(VENV)/bin/ruff check src tests benchmarks tools docs/*.py docs/tutorials
	$(VENV)/bin/ruff format --check src tests benchmarks tools docs/*.py docs/tutorials
	$(VENV)/bin/mypy  # [tool.mypy] in pyproject.toml: all of src/attnkit, strict on attnkit.nn and attnkit.models

bench: setup
	$(PY) benchmarks/encoder_block.py
