# The README's two commands: `make demo` (set up, capture the example, report it) and `make test`.
PYTHON ?= python3
PIP_CONSTRAINTS ?= .ci/constraints.txt
RUN_DIR ?= runs/demo

.PHONY: setup demo test test-fast samples bench lint readme fuzz

setup:
	$(PYTHON) -m pip install -q -c $(PIP_CONSTRAINTS) -e '.[examples,dev,spark]'

demo: setup
	tracekit capture -o $(RUN_DIR) --force -- $(PYTHON) examples/infer.py --requests 16
	tracekit report $(RUN_DIR) -o $(RUN_DIR)/report.html --force
	@echo "Open $(RUN_DIR)/report.html"

# One worker per core; a test file stays on one worker, so its module fixtures (captures) run once;
# the longest files start first (tests/conftest.py RUN_FIRST, kept in order by --no-loadscope-reorder).
test:
	$(PYTHON) -m pytest -q -p no:cacheprovider -n auto --dist loadfile --no-loadscope-reorder tests

# While you work: no nsys captures, no browser, nothing marked slow.
test-fast:
	$(PYTHON) -m pytest -q -p no:cacheprovider -n auto --dist loadfile --no-loadscope-reorder -m "not slow and not nsys and not browser" tests

# The hostile-input suites with 25x the examples (docs/security.md); CI runs the short ones.
fuzz:
	HYPOTHESIS_PROFILE=long $(PYTHON) -m pytest -q -p no:cacheprovider tests/test_hostile_io.py tests/test_hostile_scrub.py

samples:
	$(PYTHON) examples/make_samples.py

bench:
	$(PYTHON) bench/bench_ingest.py

# Style, types (mypy --strict, pyproject's [tool.mypy]) and the generated docs being current.
lint:
	ruff check tracekit tests bench examples tools
	ruff format --check tracekit tests bench examples tools
	$(PYTHON) -m mypy
	$(PYTHON) tools/gen_docs.py --check

# Paste the real output of the README's commands into it (tests/test_readme.py checks them).
readme:
	$(PYTHON) tools/readme_tour.py --update
