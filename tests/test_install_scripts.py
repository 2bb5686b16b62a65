"""scripts/gpu_ops.sh, which `make install TF=gpu` asks for Horovod's GPU build variables. No GPU
or CUDA is needed: the toolkit and NCCL are stand-in folders laid out as CUDA's and the
nvidia-nccl-cu12 wheel's are, and the default search places are switched off."""
import os
import subprocess

from tests.support import ROOT

SCRIPT = ROOT / "scripts" / "gpu_ops.sh"


def gpu_ops(tf: str, venv, **env) -> subprocess.CompletedProcess:
    # no nvcc on PATH, no default places: only what the test lays out
    base = {"PATH": "/usr/bin:/bin", "CUDA_SEARCH": "", "NCCL_SEARCH": ""}
    return subprocess.run(["bash", str(SCRIPT), tf, str(venv)], env={**base, **env}, capture_output=True,
                          text=True, timeout=30)


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
    assert proc.stdout.split() == ["HOROVOD_GPU_OPERATIONS=NCCL", f"HOROVOD_CUDA_HOME={cuda}",
                                   f"HOROVOD_NCCL_INCLUDE={nccl / 'include'}", f"HOROVOD_NCCL_LIB={nccl / 'lib'}",
                                   "HOROVOD_NCCL_LINK=SHARED"]
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
    proc = subprocess.run(["bash", str(SCRIPT), "gpu", ".venv"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=30, env={"PATH": "/usr/bin:/bin", "CUDA_SEARCH": "", "NCCL_SEARCH": "",
                                           "HOROVOD_CUDA_HOME": str(cuda)})
    assert f"HOROVOD_NCCL_INCLUDE={nccl / 'include'}" in proc.stdout.split(), proc.stdout + proc.stderr


def test_a_gpu_build_set_by_hand_is_left_alone(tmp_path):
    cuda = toolkit(tmp_path / "cuda")
    nccl_wheel(tmp_path / ".venv")
    proc = gpu_ops("gpu", tmp_path / ".venv", HOROVOD_CUDA_HOME=str(cuda), HOROVOD_GPU_OPERATIONS="NCCL")
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")
