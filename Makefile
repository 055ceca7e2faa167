# `make demo` and `make test` set themselves up on first use (a .venv with
# `pip install -e '.[test,torch]'`: the torch extra so the suite covers `slicer.from_torch`), then run the
# main job / the whole suite.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test check lint lit pytest bytecode clean

# pip compiles the installed packages' bytecode one file at a time (half of the install's time, torch being most
# of it); compileall does the same on every core, leaving out the packages' own test folders (13% of the sources;
# nothing imports them). A file it cannot compile (a package's Python 2 test data) is only left without
# bytecode, as pip leaves it, hence `|| true`.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	$(VENV)/bin/python -m pip install -q --no-compile -e '.[test,torch]' $(EDITABLE)
	$(VENV)/bin/python -m compileall -q -j 0 -x '/tests?/' $(VENV)/lib > /dev/null || true
	touch $(STAMP)
	@mkdir -p build && touch $(LINKS)

# The package is installed as a tree of links (pip's strict editable mode, under build/__editable__*): one
# `slicer` folder in which python/slicer/'s modules and the top-level dialect/, lowering/ and runtime/ (mapped by
# pyproject.toml's package-dir) all sit, so imports, import-linter and mypy see one package, each file once. An
# edit shows at once (each module is a link); a module added, renamed or removed changes its folder, and the
# tree is made again.
EDITABLE := --config-settings editable_mode=strict
LINKS := build/.package-links
SOURCE_DIRS := $(shell find python/slicer dialect lowering runtime -type d -not -name __pycache__ 2>/dev/null)
$(LINKS): $(STAMP) $(SOURCE_DIRS)
	$(VENV)/bin/python -m pip install -q --no-deps -e . $(EDITABLE)
	@mkdir -p build && touch $(LINKS)

demo: $(STAMP) $(LINKS)
	$(VENV)/bin/python examples/demo.py

lit: $(STAMP) bytecode
	$(VENV)/bin/lit -sv test

# pytest on every core (pytest-xdist workers; test/conftest.py shares one kernel cache between them). A worker
# that runs out of tests takes some of another's (worksteal): the long tests do not all end up on one. The
# slowest tests are listed at the end, so every run shows where the suite's time goes.
PYTEST := $(VENV)/bin/python -m pytest -n auto --dist worksteal --durations=25
# The fast tier (`make check`): the tests that start no MPI rank, run no benchmark script and are not `slow`
# (markers: pyproject.toml; test/conftest.py sets `mpi` and `benchmark` from a test's path).
FAST := -m "not mpi and not benchmark and not slow"

pytest: $(STAMP) lint bytecode
	$(PYTEST)

# The package compiled to bytecode once, before the suites: every test process, MPI rank and tool subprocess
# then reads it instead of compiling the sources again (hundreds of processes; none writes bytecode itself
# where PYTHONDONTWRITEBYTECODE is set, as on CI machines). Compiled in the link tree, where the modules are
# imported from (Python keeps a module's bytecode beside the path it imported).
bytecode: $(LINKS)
	$(VENV)/bin/python -m compileall -q -j 0 build/__editable__.slicer-* > /dev/null

# The lint gate (issue 47): ruff with pyproject.toml's rules (pyflakes, isort, bugbear, pyupgrade, line length;
# every suppression with its code), then mypy on the package (basic mode; pyproject.toml lists the modules whose
# type errors are still to fix). A second for ruff; mypy's first run takes longer (several seconds of one core),
# later ones read its cache (.mypy_cache). `check` and `test` run ruff first and mypy beside the suites, so a
# fresh clone's first mypy run does not leave the second core idle; either target fails if mypy does.
lint: $(STAMP)
	$(VENV)/bin/ruff check --quiet .
	$(VENV)/bin/mypy

# The suites of `check` and `test`: mypy, lit (its arguments: $(1)) and pytest (its arguments: $(2)) at the same
# time (lit's time is mostly a few long tests, which pytest's workers overlap); mypy's and lit's reports are
# printed after pytest's. The target fails if any of them does.
define SUITES
	@mkdir -p build; status=0; \
	$(VENV)/bin/mypy > build/mypy.log 2>&1 & mypy=$$!; \
	$(VENV)/bin/lit -sv $(1) test > build/lit.log 2>&1 & lit=$$!; \
	$(PYTEST) $(2) || status=1; \
	wait $$mypy || status=1; \
	wait $$lit || status=1; \
	cat build/mypy.log build/lit.log; \
	exit $$status
endef

# Everything: ruff, then mypy, lit and pytest side by side (SUITES).
test: $(STAMP) bytecode
	$(VENV)/bin/ruff check --quiet .
	$(call SUITES,,)

# The inner loop: lit without its whole-model tests (`REQUIRES: whole-suite`) and the fast tier of pytest (not
# mpi, benchmark or slow), run together as `test` runs them.
check: $(STAMP) bytecode
	$(VENV)/bin/ruff check --quiet .
	$(call SUITES,--param tier=fast,$(FAST))

clean:
	rm -rf $(VENV) build .pytest_cache .hypothesis .ruff_cache .mypy_cache
