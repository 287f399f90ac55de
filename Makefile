# The two commands of the quick start: `make demo` and `make test`. Each installs what it needs.
PY := .venv/bin/python
PYTEST_ARGS ?=
# Two xdist workers per core: most of the host suite's time is spent waiting (lab clusters coming up,
# the waits Kubernetes' e2e tests prescribe), not computing (CONTRIBUTING.md#where-the-time-goes).
XDIST ?= $(shell echo $$(( 2 * $$(nproc) )))

.PHONY: setup demo test test-host test-load test-vm unit lint commits bench-compile image clean

setup:
	@scripts/setup.sh

demo:
	@scripts/setup.sh demo
	$(PY) -m netkit.lab.demo

# Host tests (unit, goldens, network namespaces) under xdist, then the IPVS tests inside one VM boot
# (this kernel has no IPVS; vm-images/ builds a small VM from Debian's kernel, cached in .cache/vm).
test: setup
	$(PY) -m pytest -n $(XDIST) --dist loadgroup -q $(PYTEST_ARGS) tests
	vm-images/run-tests

test-host: setup
	$(PY) -m pytest -n $(XDIST) --dist loadgroup -q $(PYTEST_ARGS) tests

# The host tests again with one core kept busy (scripts/with-cpu-hog): a test that assumes an idle
# machine fails here. .ci/run runs it after `make test`.
test-load: setup
	scripts/with-cpu-hog $(PY) -m pytest -n $(XDIST) --dist loadgroup -q $(PYTEST_ARGS) tests

test-vm: setup
	vm-images/run-tests

unit: setup
	$(PY) -m pytest -n auto -q tests/unit

lint: setup
	$(PY) -m ruff check netkit tests bench scripts
	$(PY) -m mypy
	$(PY) -m vulture

# Commit subjects since BASE longer than 72 characters (CONTRIBUTING.md#commits); history is not rewritten.
BASE ?= main
commits:
	@git log --format=%s $(BASE)..HEAD | python3 -c "import sys; long = [s for s in sys.stdin.read().splitlines() \
		if len(s) > 72]; print(*(f'{len(s)}: {s}' for s in long), sep='\n') if long else None; sys.exit(bool(long))"

bench-compile: setup
	$(PY) bench/compile.py

# netkit's node image netkit:<version> in podman's local storage, from Debian's archive and PyPI alone
# (no container registry); rebuilt only when its inputs change (scripts/build-image.sh).
image: setup
	@scripts/build-image.sh

clean:
	rm -rf .venv .pytest_cache .mypy_cache .ruff_cache
