# One-command set-up and tests. `make install` needs a C++ compiler (gcc 12 to 14 run) and the
# Python of its stack with its venv module and headers (Debian/Ubuntu: apt-get install
# python3-venv python3-dev g++ make git); CI runs 3.11 on Debian 12 and 3.13 on Debian 13
# (docs/install.md, "Systems run"). The stacks (docs/install.md; deepdensity/utils/stack.py):
#   make install            the current stack in .venv: TensorFlow 2.21 (CPU) with tf-keras 2.21
#                           (Keras 2), numpy 2, Horovod 0.28.1 built with the project's patches
#                           (scripts/horovod/), MPI beside Gloo (below); Python 3.10 to 3.13
#                           (python3 by default)
#   make install STACK=paper   in .venv-paper: the paper-era stack the committed study was
#                           trained on: TensorFlow 2.15.1 with its Keras 2.15, numpy below 2,
#                           Horovod 0.28.1's code as released (the compiler patch alone); Python 3.10 or 3.11 (python3.11 by default). Every target
#                           takes STACK: make test STACK=paper
#   make install STACK=existing   a venv (.venv-existing) that sees the TensorFlow and Horovod of
#                           the interpreter PYTHON (a cluster module, NVIDIA's container) and
#                           leaves them as they are; `deepdensity --version` judges them
#   make install TF=gpu     CUDA TensorFlow (tensorflow[and-cuda]), and Horovod's GPU allreduce on
#                           NCCL where the CUDA toolkit (nvcc) and NCCL are there
#                           (scripts/gpu_ops.sh; else one line saying so). Untested on a GPU here.
#   make install MPI=off    Horovod with Gloo alone
#   make install KERNEL_BUILD=no   leave the rendering kernel (lib/render-tf*.so) as it is
STACK  ?= current
TF     ?= cpu
ifeq ($(STACK),paper)
PYTHON ?= python3.11
PYTHONS := 3.10 3.11
VENV   ?= .venv-paper
EXTRA  := paper-$(TF)
KERAS_PIN :=
else ifeq ($(STACK),current)
PYTHON ?= python3
PYTHONS := 3.10 3.13
VENV   ?= .venv
EXTRA  := $(TF)
# pyproject.toml's gpu extra holds tf-keras; beside tensorflow-cpu it goes in without its dependencies,
# else pip adds `tensorflow` (572 MB) into the same folder
KERAS_PIN := $(if $(filter cpu,$(TF)),tf-keras==2.21.0)
else ifeq ($(STACK),existing)
PYTHON ?= python3
PYTHONS := 3.10 3.13
VENV   ?= .venv-existing
else
$(error STACK=$(STACK): current (the default), paper or existing)
endif
BIN    := $(VENV)/bin
PY     := $(BIN)/python
# Horovod's MPI controller beside Gloo, as the paper ran OpenMPI: auto installs Debian's OpenMPI
# where it is missing and this is root, and builds Horovod with it; where neither, Gloo alone,
# said in one line (scripts/openmpi.sh). horovodrun then runs under MPI; `--gloo` picks Gloo,
# which does better on a host whose cores are shared with other work (docs/performance.md).
MPI    ?= auto
KERNEL_BUILD ?= yes
# Horovod must see the TensorFlow it links against: scripts/horovod.sh builds it after TF is in.
HOROVOD_ENV := HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1
KERNEL_SRC := deepdensity/model/kernels/render.cc
PRESET ?= default
RUNNER ?=

.PHONY: install stack-of-venv test test-medium test-smoke test-all cluster-packages test-cluster coverage bench repro lr-sweep clean

install: stack-of-venv $(VENV)/.installed $(if $(filter no,$(KERNEL_BUILD)),,$(VENV)/.kernel)

# .installed names the stack a venv holds (empty: from before the stacks were named, the paper
# era's): checked at every make, so that another stack's venv is never used or installed over
stack-of-venv:
	@had=$$(cat $(VENV)/.installed 2>/dev/null || true); had=$${had:-$$([ -f $(VENV)/.installed ] && echo paper)}; \
	if [ -n "$$had" ] && [ "$$had" != "$(STACK)" ]; then echo "error: $(VENV) holds the $$had stack, not the $(STACK) one: make ... STACK=$$had, or pick another VENV=..., or rm -rf $(VENV) first" >&2; exit 2; fi

# setuptools below 81: TensorBoard imports pkg_resources, which setuptools 84 no longer ships
# (`tensorboard --logdir runs` failed with ModuleNotFoundError) and 80 still does. cmake below 4,
# which Horovod's build uses (scripts/horovod.sh): cmake 4 refuses its bundled gloo's
# cmake_minimum_required below 3.5 ("Compatibility with CMake < 3.5 has been removed").
# .installed names the stack: a venv of another stack is not installed over (VENV=... picks another).
$(VENV)/.installed: pyproject.toml scripts/horovod.sh $(wildcard scripts/horovod/*.patch)
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; run 'make install PYTHON=/path/to/python3.X' (the $(STACK) stack: Python $(word 1,$(PYTHONS)) to $(word 2,$(PYTHONS)))"; exit 2; }
	@$(PYTHON) -c 'import sys; lo, hi = (tuple(map(int, v.split("."))) for v in sys.argv[1:]); sys.exit(not lo <= sys.version_info[:2] <= hi)' $(PYTHONS) \
	    || { echo "error: $(PYTHON) is Python $$($(PYTHON) -c 'import platform; print(platform.python_version())'); the $(STACK) stack needs $(word 1,$(PYTHONS)) to $(word 2,$(PYTHONS)): make install PYTHON=/path/to/python3.X" >&2; exit 2; }
	@case "$(MPI)" in auto|off) ;; *) echo "error: MPI=$(MPI) ($(origin MPI)): make install MPI=auto or MPI=off" >&2; exit 2;; esac
	@case "$(TF)" in cpu|gpu) ;; *) echo "error: TF=$(TF): cpu or gpu" >&2; exit 2;; esac
ifeq ($(STACK),existing)
	$(PYTHON) -m venv --system-site-packages $(VENV)
	@# what the interpreter already has is pinned, so that pip adds the project's own needs and
	@# changes none of them (a conflict, e.g. numpy 2 there, stops here with pip's reason)
	$(PY) -m pip freeze --all 2>/dev/null | grep -iE '^(tensorflow|tensorflow-cpu|tensorflow-gpu|tf-keras|tf_keras|keras|numpy|horovod|h5py|protobuf)==' > $(VENV)/kept.txt || true
	$(PY) -m pip install --quiet -c $(VENV)/kept.txt -e ".[test]"
	$(BIN)/deepdensity --version
else
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade "pip>=23" "setuptools>=65,<81" wheel "cmake>=3.13,<4"
	$(PY) -m pip install --quiet -e ".[$(EXTRA),test]"
	$(if $(KERAS_PIN),$(PY) -m pip install --quiet --no-deps "$(KERAS_PIN)")
	env $(HOROVOD_ENV) $$(scripts/openmpi.sh "$(MPI)" "$(VENV)") $$(scripts/gpu_ops.sh "$(TF)" "$(VENV)") scripts/horovod.sh "$(VENV)"
	$(BIN)/horovodrun --check-build
	$(BIN)/deepdensity --version
endif
	echo "$(STACK)" > $@

# The rendering kernel, compiled against the venv's TensorFlow into lib/render-tf<version>.so
# (optional: without a compiler the layer renders with TensorFlow ops; the build says so).
$(VENV)/.kernel: $(KERNEL_SRC) $(VENV)/.installed
	$(PY) -m deepdensity.model.kernels.build
	touch $@

# The tiers (pytest.ini's markers; docs/performance.md#tests has their counts and times):
#   make test        the fast tier: no training subprocess, no horovodrun, nothing that takes
#                    seconds in-process (-m "not slow and not medium"); its budget is 90 s on the
#                    project's 2-core machines
#   make test-medium the middle tier (`medium`): tests that build or fit a TensorFlow model, or
#                    render the committed study's reports, in pytest's own process
#   make test-all    every test, real `horovodrun -np 2` runs, the tiny study and, where their
#                    packages are installed (make cluster-packages), the two-host and Slurm tests,
#                    in three pytest lanes side by side (scripts/test_all.sh: tests/cluster, whose
#                    tests wait on daemons; tests/training; the others); each lane lists its
#                    slowest tests at the end, so that the next regression shows
#   make coverage    test-all under coverage: the census of scripts/test_census.py (tests, distinct
#                    assertions executed, coverage of deepdensity/, seconds by file)
FAST := -m "not slow and not medium"
# ruff first (pyproject.toml [tool.ruff]: the lint rules that find mistakes, and the layout ruff
# format gives), in a second
test: install
	$(BIN)/ruff check --quiet .
	$(BIN)/ruff format --check --quiet .
	@start=$$(date +%s); $(BIN)/pytest -q $(FAST) tests; code=$$?; \
	echo "make test: the fast tier in $$(( $$(date +%s) - start )) s (budget 90 s); the middle tier is make test-medium, everything make test-all"; \
	exit $$code

test-medium: install
	$(BIN)/pytest -q -m "medium and not slow" tests

# the fast tier and the tests marked smoke: a second stack's check (Debian 13's in .ci/run; STACK=paper)
test-smoke: install
	@start=$$(date +%s); $(BIN)/pytest -q -rs -m "smoke or not (slow or medium)" tests; code=$$?; \
	echo "make test-smoke: $(STACK) stack ($(VENV)) in $$(( $$(date +%s) - start )) s"; exit $$code

test-all: install
	$(BIN)/ruff check --quiet .
	$(BIN)/ruff format --check --quiet .
	scripts/test_all.sh $(BIN)/pytest

# Debian's openssh-server, slurm-wlm and munge for tests/cluster, where missing (needs root and
# the package registry); .ci/run installs them before its one `make test-all`.
cluster-packages:
	tests/cluster/install_packages.sh || echo "warning: openssh-server, slurm-wlm or munge could not be installed; the tests that need them will say so and skip"

# Two hosts for real (tests/cluster) alone: network namespaces with an ssh server each, and a
# Slurm controller with a node on each; needs root. Also part of test-all, skipped there with
# its reason where the packages, root or namespaces are missing.
test-cluster: install cluster-packages
	$(BIN)/pytest -q -rs tests/cluster

COVERAGE_DIR ?= build/coverage
coverage: install
	rm -rf $(COVERAGE_DIR) && mkdir -p $(COVERAGE_DIR)
	-COVERAGE_FILE=$(abspath $(COVERAGE_DIR))/.coverage $(BIN)/pytest -q -rs --junitxml=$(COVERAGE_DIR)/junit.xml \
	    --cov --cov-config=$(abspath .coveragerc) --cov-report= tests
	@# pytest-cov combines the processes' files itself when it can; what it left is combined here
	-COVERAGE_FILE=$(abspath $(COVERAGE_DIR))/.coverage $(BIN)/coverage combine --quiet --append --rcfile=.coveragerc
	$(PY) scripts/test_census.py --junit $(COVERAGE_DIR)/junit.xml --coverage $(COVERAGE_DIR)/.coverage

bench: install
	$(PY) -m deepdensity.bench $(if $(OUT),--out '$(OUT)')

# DEEPDENSITY_MAKE_TARGET: an interrupted study tells the user to rerun this make target (and not
# the python line under it); set here and not read from MAKELEVEL, which every nested make and
# its children inherit (pytest under `make test-all` included).
repro: install
	DEEPDENSITY_MAKE_TARGET=repro $(PY) -m deepdensity.repro --preset $(PRESET) $(if $(RUNNER),--runner '$(RUNNER)') $(if $(OUT),--out '$(OUT)')

lr-sweep: install
	DEEPDENSITY_MAKE_TARGET=lr-sweep $(PY) -m deepdensity.repro --preset $(PRESET) --lr-sweep $(if $(OUT),--out '$(OUT)')

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache deepdensity/model/kernels/lib deepdensity/model/kernels/_render.so
