# One-command set-up and tests. `make install` needs only Python 3.11, a C++ compiler and cmake.
#   make install            CPU TensorFlow (default); Horovod with MPI beside Gloo (below)
#   make install TF=gpu     CUDA TensorFlow (tensorflow[and-cuda]==2.15.1), and Horovod's GPU
#                           allreduce on NCCL where the CUDA toolkit (nvcc) and NCCL are there
#                           (scripts/gpu_ops.sh; else one line saying so). Untested on a GPU here.
#   make install MPI=off    Horovod with Gloo alone
#   make install KERNEL_BUILD=no   leave the rendering kernel (lib/render.so) as it is, e.g. for a
#                           second venv (VENV=...) beside one whose runs use the kernel now
PYTHON ?= python3.11
VENV   ?= .venv
TF     ?= cpu
# Horovod's MPI controller beside Gloo, as the paper ran OpenMPI: auto installs Debian's OpenMPI
# where it is missing and this is root, and builds Horovod with it; where neither, Gloo alone,
# said in one line (scripts/openmpi.sh). horovodrun then runs under MPI; `--gloo` picks Gloo,
# which does better on a host whose cores are shared with other work (docs/performance.md).
MPI    ?= auto
KERNEL_BUILD ?= yes
BIN    := $(VENV)/bin
PY     := $(BIN)/python
# Horovod must see the TensorFlow it links against, hence --no-build-isolation after TF is in.
HOROVOD_ENV := HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1
KERNEL_SRC := deepdensity/model/kernels/render.cc
KERNEL := deepdensity/model/kernels/lib/render.so
PRESET ?= default
RUNNER ?=

.PHONY: install test test-medium test-all cluster-packages test-cluster coverage bench repro lr-sweep clean

install: $(VENV)/.installed $(if $(filter no,$(KERNEL_BUILD)),,$(KERNEL))

# setuptools below 81: TensorBoard 2.15 imports pkg_resources, which setuptools 84 no longer ships
# (`tensorboard --logdir runs` failed with ModuleNotFoundError) and 80 still does.
# Horovod is uninstalled first: a venv built before (rm .venv/.installed, to rebuild it with MPI
# or without) holds a horovod 0.28.1 that pip would keep as it is.
$(VENV)/.installed: setup.py
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; install Python 3.11 or run 'make install PYTHON=/path/to/python3.11'"; exit 2; }
	@case "$(MPI)" in auto|off) ;; *) echo "error: MPI=$(MPI) ($(origin MPI)): make install MPI=auto or MPI=off" >&2; exit 2;; esac
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade "pip>=23" "setuptools>=65,<81" wheel "cmake>=3.13"
	$(PY) -m pip install --quiet -e ".[$(TF),test]"
	$(PY) -m pip uninstall --quiet --yes horovod 2>/dev/null || true
	env $(HOROVOD_ENV) $$(scripts/openmpi.sh "$(MPI)" "$(VENV)") $$(scripts/gpu_ops.sh "$(TF)" "$(VENV)") $(PY) -m pip install --no-build-isolation --no-cache-dir "horovod==0.28.1"
	$(BIN)/horovodrun --check-build
	touch $@

# The rendering kernel, compiled against the TensorFlow just installed (optional: without a
# compiler the layer renders with TensorFlow ops; the build says so).
$(KERNEL): $(KERNEL_SRC) $(VENV)/.installed
	$(PY) -m deepdensity.model.kernels.build

# The tiers (pytest.ini's markers; docs/performance.md#tests has their counts and times):
#   make test        the fast tier: no training subprocess, no horovodrun, nothing that takes
#                    seconds in-process (-m "not slow and not medium"); its budget is 90 s on the
#                    project's 2-core machines
#   make test-medium the middle tier (`medium`): tests that build or fit a TensorFlow model, or
#                    render the committed study's reports, in pytest's own process
#   make test-all    every test, real `horovodrun -np 2` runs, the tiny study and, where their
#                    packages are installed (make cluster-packages), the two-host and Slurm tests;
#                    the 30 slowest are listed at the end, so that the next regression shows
#   make coverage    test-all under coverage: the census of scripts/test_census.py (tests, distinct
#                    assertions executed, coverage of deepdensity/, seconds by file)
FAST := -m "not slow and not medium"
test: install
	@start=$$(date +%s); $(BIN)/pytest -q $(FAST) tests; code=$$?; \
	echo "make test: the fast tier in $$(( $$(date +%s) - start )) s (budget 90 s); the middle tier is make test-medium, everything make test-all"; \
	exit $$code

test-medium: install
	$(BIN)/pytest -q -m "medium and not slow" tests

test-all: install
	$(BIN)/pytest -q -rs --durations=30 tests

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
	rm -rf $(VENV) build *.egg-info .pytest_cache $(KERNEL) deepdensity/model/kernels/_render.so
