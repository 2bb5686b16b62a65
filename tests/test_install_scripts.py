"""The scripts `make install` asks for Horovod's build variables. scripts/gpu_ops.sh (for TF=gpu),
first: no GPU or CUDA is needed: the toolkit and NCCL are stand-in folders laid out as CUDA's and the
nvidia-nccl-cu12 wheel's are, and the default search places are switched off."""

import os
import subprocess
from pathlib import Path

import pytest

from tests.support import ROOT

SCRIPT = ROOT / "scripts" / "gpu_ops.sh"


def gpu_ops(tf: str, venv, **env) -> subprocess.CompletedProcess:
    # no nvcc on PATH, no default places: only what the test lays out
    base = {"PATH": "/usr/bin:/bin", "CUDA_SEARCH": "", "NCCL_SEARCH": ""}
    return subprocess.run(
        ["bash", str(SCRIPT), tf, str(venv)], env={**base, **env}, capture_output=True, text=True, timeout=30
    )


def toolkit(root):
    (root / "bin").mkdir(parents=True)
    (root / "include").mkdir()
    (root / "bin" / "nvcc").write_text("#!/bin/sh\n")
    (root / "bin" / "nvcc").chmod(0o755)
    (root / "include" / "cuda_runtime.h").write_text("")
    return root


def nccl_wheel(venv):
    home = venv / "lib" / "python3.11" / "site-packages" / "nvidia" / "nccl"
    (home / "include").mkdir(parents=True)
    (home / "lib").mkdir()
    (home / "include" / "nccl.h").write_text("#define NCCL_MAJOR 2\n")
    (home / "lib" / "libnccl.so.2").write_text("")
    return home


def test_a_cpu_install_asks_for_nothing(tmp_path):
    proc = gpu_ops("cpu", tmp_path / ".venv")
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")


def test_without_the_toolkit_horovod_builds_without_nccl_and_says_so_in_one_line(tmp_path):
    proc = gpu_ops("gpu", tmp_path / ".venv")
    assert proc.returncode == 0 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "without NCCL (no CUDA toolkit: nvcc not found)" in proc.stderr


def test_the_toolkit_and_the_venvs_nccl_wheel_give_the_nccl_build(tmp_path):
    venv = tmp_path / ".venv"
    cuda, nccl = toolkit(tmp_path / "cuda-12"), nccl_wheel(venv)
    proc = gpu_ops("gpu", venv, HOROVOD_CUDA_HOME=str(cuda))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [
        "HOROVOD_GPU_OPERATIONS=NCCL",
        f"HOROVOD_CUDA_HOME={cuda}",
        f"HOROVOD_NCCL_INCLUDE={nccl / 'include'}",
        f"HOROVOD_NCCL_LIB={nccl / 'lib'}",
        "HOROVOD_NCCL_LINK=SHARED",
    ]
    # Horovod's FindNCCL looks for libnccl.so; the wheel has the versioned name only
    assert os.readlink(nccl / "lib" / "libnccl.so") == "libnccl.so.2"


def test_an_nvcc_on_path_finds_its_toolkit(tmp_path):
    cuda = toolkit(tmp_path / "cuda")
    nccl_wheel(tmp_path / ".venv")
    proc = gpu_ops("gpu", tmp_path / ".venv", PATH=f"{cuda / 'bin'}:/usr/bin:/bin")
    assert f"HOROVOD_CUDA_HOME={cuda}" in proc.stdout.split(), proc.stderr


def test_without_nccl_horovod_builds_without_it_and_says_what_to_install(tmp_path):
    cuda = toolkit(tmp_path / "cuda")
    proc = gpu_ops("gpu", tmp_path / ".venv", HOROVOD_CUDA_HOME=str(cuda))
    assert proc.returncode == 0 and proc.stdout == ""
    assert "without NCCL (nccl.h not found)" in proc.stderr and "libnccl-dev" in proc.stderr


def test_a_system_nccl_without_its_development_link_is_left_alone(tmp_path):
    """Outside the venv the script links nothing: that is libnccl-dev's to provide."""
    cuda = toolkit(tmp_path / "cuda")
    (cuda / "include" / "nccl.h").write_text("")
    (cuda / "lib").mkdir()
    (cuda / "lib" / "libnccl.so.2").write_text("")
    proc = gpu_ops("gpu", tmp_path / ".venv", HOROVOD_CUDA_HOME=str(cuda))
    assert proc.stdout == "" and "libnccl-dev" in proc.stderr
    assert not (cuda / "lib" / "libnccl.so").exists()


def test_paths_are_absolute_when_the_venv_is_given_relative(tmp_path):
    """make install passes VENV=.venv; pip builds Horovod elsewhere, so the paths must not be relative."""
    cuda, nccl = toolkit(tmp_path / "cuda"), nccl_wheel(tmp_path / ".venv")
    proc = subprocess.run(
        ["bash", str(SCRIPT), "gpu", ".venv"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": "/usr/bin:/bin", "CUDA_SEARCH": "", "NCCL_SEARCH": "", "HOROVOD_CUDA_HOME": str(cuda)},
    )
    assert f"HOROVOD_NCCL_INCLUDE={nccl / 'include'}" in proc.stdout.split(), proc.stdout + proc.stderr


def test_a_gpu_build_set_by_hand_is_left_alone(tmp_path):
    cuda = toolkit(tmp_path / "cuda")
    nccl_wheel(tmp_path / ".venv")
    proc = gpu_ops("gpu", tmp_path / ".venv", HOROVOD_CUDA_HOME=str(cuda), HOROVOD_GPU_OPERATIONS="NCCL")
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")


# scripts/openmpi.sh, which `make install` asks whether Horovod gets MPI beside Gloo. The machine's
# own MPI, apt-get and user are out of its sight: PATH holds only a folder the test lays out, with
# a stand-in `id` for the user, `apt-get` that logs its calls (and installs stand-ins, or fails),
# and mpicxx and mpirun stand-ins where the test says they are there.
OPENMPI = ROOT / "scripts" / "openmpi.sh"
MPIRUN_VERSION = "mpirun (Open MPI) 4.1.4"


def stand_in(folder, name, body):
    path = folder / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


def machine(tmp_path, uid=0, mpi=False, apt=None):
    """A PATH folder: `id -u` says uid; mpicxx and mpirun if mpi; apt-get if apt is 'installs'
    (puts mpicxx and mpirun in place), 'fails' (its install exits 100), 'no lists' (its update
    exits 100, its install works) or 'installs nothing'."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "head").symlink_to("/usr/bin/head")
    stand_in(bin_, "id", f"echo {uid}")
    mpi_tools = (
        f"printf \"#!/bin/sh\\necho '{MPIRUN_VERSION}'\\n\" > {bin_}/mpirun; "
        f'printf "#!/bin/sh\\n" > {bin_}/mpicxx; /bin/chmod 755 {bin_}/mpirun {bin_}/mpicxx'
    )
    if mpi:
        subprocess.run(["sh", "-c", mpi_tools], check=True)
    if apt is not None:
        body = {
            "installs": f'case "$*" in *install*) {mpi_tools};; esac',
            "fails": 'case "$*" in *install*) exit 100;; esac',
            "no lists": f'case "$*" in update*) exit 100;; *install*) {mpi_tools};; esac',
            "installs nothing": "true",
        }[apt]
        stand_in(bin_, "apt-get", f'echo "$@" >> {tmp_path}/apt.log\n{body}')
    return bin_


def openmpi(want, bin_) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["/bin/bash", str(OPENMPI), want, ".venv"], env={"PATH": str(bin_)}, capture_output=True, text=True, timeout=30
    )


def apt_calls(tmp_path) -> list:
    log = tmp_path / "apt.log"
    return log.read_text().splitlines() if log.exists() else []


def test_mpi_on_path_gives_the_mpi_build_and_installs_nothing(tmp_path):
    proc = openmpi("auto", machine(tmp_path, mpi=True, apt="installs"))
    assert (proc.returncode, proc.stdout) == (0, "HOROVOD_WITH_MPI=1\n")
    assert proc.stderr == f"Horovod's controllers: MPI ({MPIRUN_VERSION}) beside Gloo\n"
    assert apt_calls(tmp_path) == []


INSTALL = ["update -qq", "install -y -qq openmpi-bin libopenmpi-dev"]


def test_as_root_without_mpi_debians_openmpi_is_installed_and_built_with(tmp_path):
    proc = openmpi("auto", machine(tmp_path, uid=0, apt="installs"))
    assert (proc.returncode, proc.stdout) == (0, "HOROVOD_WITH_MPI=1\n")
    assert apt_calls(tmp_path) == INSTALL
    assert proc.stderr.splitlines()[-1] == f"Horovod's controllers: MPI ({MPIRUN_VERSION}) beside Gloo"


def test_a_failed_package_list_update_is_said_and_the_install_still_tried(tmp_path):
    proc = openmpi("auto", machine(tmp_path, uid=0, apt="no lists"))
    assert (proc.returncode, proc.stdout) == (0, "HOROVOD_WITH_MPI=1\n")
    assert apt_calls(tmp_path) == INSTALL
    assert "warning: apt-get update failed" in proc.stderr


def test_an_mpi_setting_other_than_auto_or_off_is_refused(tmp_path):
    proc = openmpi("no", machine(tmp_path, uid=0, apt="installs"))
    assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", "error: MPI=no: auto or off\n")
    assert apt_calls(tmp_path) == [], "nothing installed for a value it does not know"


@pytest.mark.parametrize(
    "uid, apt, cause",
    [
        (1000, "installs", "no mpicxx and mpirun on PATH"),  # not root: nothing installed
        (0, None, "no mpicxx and mpirun on PATH"),  # root without apt-get
        (0, "fails", "apt-get install openmpi-bin libopenmpi-dev failed"),
        (0, "installs nothing", "mpicxx or mpirun still missing after apt-get"),
    ],
)
def test_without_mpi_horovod_builds_with_gloo_alone_and_says_why_in_one_line(tmp_path, uid, apt, cause):
    proc = openmpi("auto", machine(tmp_path, uid=uid, apt=apt))
    assert (proc.returncode, proc.stdout) == (0, "HOROVOD_WITHOUT_MPI=1\n"), "the install goes on, with Gloo"
    said = proc.stderr.splitlines()[-1]
    assert said.startswith(f"note: Horovod is built with Gloo alone ({cause}); for MPI beside it, "), said
    assert said.endswith("rm .venv/.installed && make install"), said
    if uid:
        assert apt_calls(tmp_path) == [], "a user who is not root is not made to run apt-get"
        assert "apt-get install openmpi-bin libopenmpi-dev" in said, "it says what to install"
    else:
        assert apt_calls(tmp_path) == ([] if apt is None else INSTALL)


def test_mpi_off_builds_gloo_alone_even_where_mpi_is_there(tmp_path):
    proc = openmpi("off", machine(tmp_path, mpi=True, apt="installs"))
    assert (proc.returncode, proc.stdout) == (0, "HOROVOD_WITHOUT_MPI=1\n")
    assert (
        proc.stderr == "note: Horovod is built with Gloo alone (MPI=off); for MPI beside it, run: rm .venv/.installed "
        "&& make install\n"
    )
    assert apt_calls(tmp_path) == []


@pytest.mark.slow
def test_the_horovod_patch_applies_to_horovod_0_28_1_as_published(tmp_path):
    """scripts/horovod.sh applies the patch to the source distribution pip downloads; a patch
    that no longer applies would stop `make install` (the download needs the package registry)."""
    import sys
    import tarfile

    got = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--no-binary",
            "horovod",
            "--dest",
            str(tmp_path),
            "horovod==0.28.1",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if got.returncode != 0:
        pytest.skip(f"the package registry did not give horovod 0.28.1: {got.stderr.strip()[-300:]}")
    with tarfile.open(tmp_path / "horovod-0.28.1.tar.gz") as sdist:
        sdist.extractall(tmp_path, filter="data")
    src = tmp_path / "horovod-0.28.1"
    for name in (
        "horovod-0.28.1-gcc13+.patch",
        "horovod-0.28.1-launcher.patch",  # horovod.sh's order
        "horovod-0.28.1-build.patch",
        "horovod-0.28.1-tf2.16+.patch",
    ):
        patch = ROOT / "scripts" / "horovod" / name
        applied = subprocess.run(["git", "apply", "--verbose", str(patch)], cwd=src, capture_output=True, text=True)
        assert applied.returncode == 0, applied.stderr
    callbacks = (src / "horovod" / "tensorflow" / "keras" / "callbacks.py").read_text()
    assert "from keras import backend as K" not in callbacks and "K = keras.backend" in callbacks
    assert "hlo/builder/xla_builder.h" in (src / "horovod" / "tensorflow" / "xla_mpi_ops.cc").read_text()
    assert "#include <string>" in (src / "horovod" / "common" / "group_table.h").read_text()
    cmake = (src / "CMakeLists.txt").read_text()
    assert "add_subdirectory(third_party/gloo EXCLUDE_FROM_ALL)" in cmake and 'REPLACE " -g " " "' in cmake
    assert "#include <stdexcept>" in (src / "horovod" / "common" / "common.h").read_text()
    util = (src / "horovod" / "common" / "util.py").read_text()
    assert "def _c_api_without_framework(" in util and util.count("c_api_only=True)") == 5
    span = (src / "third_party" / "flatbuffers" / "include" / "flatbuffers" / "stl_emulation.h").read_text()
    assert "  size_type count_;" in span and "const size_type count_;" not in span
    # the sources gcc 13 and 14 stopped at compile (syntax only) with this machine's compiler
    probe = subprocess.run(
        [
            "c++",
            "-std=c++17",
            "-fsyntax-only",
            f"-I{src}/third_party/flatbuffers/include",
            *(str(src / "horovod" / "common" / f"{f}.cc") for f in ("group_table", "message", "common")),
        ],
        capture_output=True,
        text=True,
    )
    assert probe.returncode == 0, probe.stderr[-2000:]


@pytest.mark.slow
def test_a_compiler_that_cannot_build_horovod_is_named_in_one_line_before_the_build(tmp_path):
    """horovod.sh compiles three of Horovod's sources with the build's compiler first: one that
    fails there (here a stand-in that fails as gcc 14 did on the unpatched sources) stops the
    install in one line naming it, its first error and what to do, before anything is built or
    uninstalled (the download needs the package registry)."""
    import sys

    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    (venv / "bin" / "python").chmod(0o755)
    cxx = tmp_path / "g++-99"
    cxx.write_text(
        "#!/bin/sh\n[ \"$1\" = --version ] && { echo 'g++-99 (Stand-in) 99.1.0'; exit 0; }\n"
        "echo \"group_table.h:35:47: error: 'string' in namespace 'std' does not name a type\" >&2\nexit 1\n"
    )
    cxx.chmod(0o755)
    got = subprocess.run(
        [str(ROOT / "scripts" / "horovod.sh"), str(venv)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "CXX": str(cxx), "PYTHONPATH": str(ROOT)},
    )
    if "Could not find a version" in got.stderr or "No matching distribution" in got.stderr:
        pytest.skip(f"the package registry did not give horovod 0.28.1: {got.stderr.strip()[-300:]}")
    errors = [line for line in got.stderr.splitlines() if line.startswith("error:")]
    assert got.returncode == 2, got.stderr[-2000:]
    assert len(errors) == 1 and "g++-99 (Stand-in) 99.1.0" in errors[0] and "does not name a type" in errors[0]
    assert "CXX=g++-12" in errors[0] and errors[0] == got.stderr.rstrip("\n").splitlines()[-1]
    assert "Building wheel" not in got.stdout + got.stderr and "uninstall" not in got.stdout + got.stderr.lower()


@pytest.mark.slow
def test_an_existing_stack_is_kept_as_it_is_and_judged(tmp_path):
    """`make install STACK=existing` in a venv that sees a TensorFlow and a Horovod through
    PYTHONPATH, as a cluster's module system provides them (here: this venv's own): the new venv
    gets the project and nothing of the stack, the stack's files are not touched, and
    `deepdensity --version` names the TensorFlow, Keras and Horovod it found with a verdict."""
    import site
    import sys
    from importlib.metadata import distribution

    module = next(p for p in site.getsitepackages() if (Path(p) / "tensorflow").is_dir())
    watched = {
        name: distribution(name)._path / "RECORD"
        for name in ("horovod", "tensorflow-cpu", "tensorflow")
        if _installed(name)
    }
    before = {name: path.stat().st_mtime_ns for name, path in watched.items()}
    venv = tmp_path / "venv"
    env = {**os.environ, "PYTHONPATH": module}
    got = subprocess.run(
        ["make", "install", "STACK=existing", f"VENV={venv}", f"PYTHON={sys._base_executable}", "KERNEL_BUILD=no"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert got.returncode == 0, got.stdout[-3000:] + got.stderr[-3000:]
    own = venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    assert not [p.name for p in own.iterdir() if p.name.split("-")[0] in ("tensorflow", "horovod", "tf_keras")]
    assert {name: path.stat().st_mtime_ns for name, path in watched.items()} == before
    assert (venv / ".installed").read_text().strip() == "existing"
    said = subprocess.run(
        [str(venv / "bin" / "deepdensity"), "--version"], env=env, capture_output=True, text=True, timeout=60
    ).stdout.splitlines()
    # what the module holds, read by pip's own metadata (not by utils/stack.py)
    from importlib.metadata import version

    tf = next(name for name in ("tensorflow-cpu", "tensorflow") if name in watched)
    assert said[2] == f"TensorFlow {version(tf)} ({tf})"
    assert said[4].startswith(f"Horovod {version('horovod')}, built against TensorFlow {version(tf)}")
    assert said[5].split(":")[0] in ("supported", "untested", "unsupported"), said


def _installed(name: str) -> bool:
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        distribution(name)
        return True
    except PackageNotFoundError:
        return False
