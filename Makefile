# Set-up and entry points.  `make demo` and `make test` create .venv when missing, install
# everything (idempotent: a stamp file records a finished install) and run.
#
#   TORCH=...   pip requirement used only when the venv cannot import torch
#               (default torch==2.13.0, the CPU wheel here; e.g. a CUDA build on a GPU box)
#   PYTHON=...  interpreter for the venv (default python3.11)
#   VENV_FLAGS=--system-site-packages   reuse a torch already installed system-wide
#   WORKERS=... pytest-xdist workers of `make test` (default: one per core, plus one: many
#               tests wait on the processes they start, and a spare worker keeps the cores
#               busy meanwhile; an idle worker takes tests queued for a busy one)
PYTHON ?= python3.11
VENV ?= .venv
TORCH ?= torch==2.13.0
VENV_FLAGS ?=
WORKERS ?= $(shell echo $$(( $$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc) + 1 )))
PY := $(VENV)/bin/python
# --no-compile, then one compileall over site-packages on every core: pip compiles each
# wheel's files on one core.  Bytecode at install time matters: with PYTHONDONTWRITEBYTECODE
# set, nothing is compiled on import, so every process would compile torch and fairseq anew
# (seconds each) and print fairseq's SyntaxWarnings.  compileall exits 1 on the few files of
# some wheels that are not meant to compile (templates), hence `|| true`.
PIP := $(PY) -m pip install --no-compile
STAMP := $(VENV)/.fairseq-entropy-installed
export PATH := $(abspath $(VENV))/bin:$(PATH)

# make wheelhouse: the wheels a machine without internet needs to install the plugin (see
# docs/install.md, "Offline install"); torch, numpy and scipy are the target's own
#   WHEELHOUSE=...  output directory (default wheelhouse)
#   PY_VERSION=...  the target's Python X.Y (default: the venv's)
#   PLATFORM=...    the target's wheel platform tag (default manylinux_2_28_x86_64)
#   EXCLUDE=...     comma-separated projects the target brings (default torch,numpy,scipy)
#   FIGURES=1       keep matplotlib (the figures of aggregate), about 24 MiB more
WHEELHOUSE ?= wheelhouse
PY_VERSION ?=
PLATFORM ?= manylinux_2_28_x86_64
EXCLUDE ?= torch,numpy,scipy
FIGURES ?= 0

.PHONY: install demo test lint bench clean wheelhouse

install: $(STAMP)

$(STAMP): setup.py requirements.txt constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV_FLAGS) $(VENV)
	$(PY) -c "import torch" 2>/dev/null || $(PIP) "$(TORCH)"
	$(PIP) --no-deps ve-fairseq==0.12.3
	$(PIP) -r requirements.txt -c constraints.txt
	$(PIP) --no-deps --no-build-isolation -e .
	$(PY) -W ignore -m compileall -q -j 0 "$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" > /dev/null 2>&1 || true
	$(PY) -c "import fairseq_entropy, fairseq, torch; print('installed: torch', torch.__version__, '/ fairseq', fairseq.__version__)"
	touch $(STAMP)

demo: $(STAMP)
	bash recipes/quickstart.sh

test: $(STAMP)
	$(PY) -m pytest -q -n $(WORKERS) --dist worksteal --durations=15 tests

lint: $(STAMP)
	$(PY) -m ruff check .

bench: $(STAMP)
	$(PY) benchmarks/bench_models.py

wheelhouse: $(STAMP)
	$(PY) -m fairseq_entropy.wheelhouse --out "$(WHEELHOUSE)" --platform "$(PLATFORM)" \
	  --exclude "$(EXCLUDE)" $(if $(PY_VERSION),--python-version "$(PY_VERSION)") \
	  $(if $(filter 1,$(FIGURES)),--figures --no-limit)

clean:
	rm -rf demo build *.egg-info .pytest_cache
