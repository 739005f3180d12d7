# The two targets a new user needs: `make demo` and `make test`. Both create .venv if missing.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-quick bench bench-compare lint clean browser docs

$(PY):
	$(PYTHON) -m venv $(VENV)

# torch is pinned to the local CPU build first, so nothing pulls a CUDA wheel. executorch is the
# reference the benchmarks and the bridge tests compare against (never a core dependency).
$(STAMP): $(PY) pyproject.toml
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[dev,models,plot,executorch,vision,clients]" torch==2.13.0
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/tensorplan plan zoo:tiny_gpt --specs

# The browser tests need Chromium and its driver: installed here where the machine allows it.
browser:
	tools/browser

test: $(STAMP) browser
	$(PY) -m pytest -q -n 2 --dist loadscope --doctest-modules src tests

test-quick: $(STAMP) browser
	$(PY) -m pytest -q -n 2 --dist loadscope -m "not slow" --doctest-modules src tests

# ONLY=pte (or "pte chunks") runs those sections alone and keeps the others as measured; JOBS
# sections run at a time (each times on one thread).
JOBS ?= 2
bench: $(STAMP)
	$(PY) benchmarks/run_all.py --out benchmarks/RESULTS.md --jobs $(JOBS) $(foreach s,$(ONLY),--only $(s))

# Every figure of benchmarks/RESULTS.md worse than at commit OLD (default: the last commit).
OLD ?= HEAD
bench-compare:
	$(PY) benchmarks/compare.py git:$(OLD) benchmarks/RESULTS.md

# The API reference is read from the sources (griffe, no import), so the site needs only the
# docs tools, not torch: a fresh clone builds it in seconds. Pinned as in pyproject's `dev` extra
# (tests/test_docs.py checks that the two agree). Strict: any warning fails the build.
DOCS_TOOLS := mkdocs==1.6.1 mkdocstrings[python]==1.0.8 mkdocstrings-python==2.0.11
DOCS_STAMP := $(VENV)/.docs-installed

$(DOCS_STAMP): $(PY) Makefile
	$(PY) -m pip install -q $(foreach t,$(DOCS_TOOLS),"$(t)")
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	$(PY) -m mkdocs build --strict -d site

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis site
