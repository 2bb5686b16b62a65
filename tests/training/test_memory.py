"""What one training process needs of memory and may use (training/memory.py), checked before
anything is written (issue 70): the limits read from the kernel's files, the estimate by hand,
and the run under a lowered address-space limit, which trains or is refused in one line, never
aborted by TensorFlow's std::bad_alloc."""

import json
import os
import resource
import signal
import subprocess
import sys
import time

import pytest

from deepdensity.config import load
from deepdensity.training import memory, runs
from deepdensity.training.memory import Limit
from deepdensity.utils.files import remove_pid_mark
from deepdensity.utils.machine import size_text
from tests.support import ROOT, SMOKE


def test_the_cgroups_limit_is_read_from_v2_and_v1_and_none_is_no_limit(tmp_path):
    own = tmp_path / "self-cgroup"
    root = tmp_path / "fs"
    (root / "job_42").mkdir(parents=True)
    own.write_text("0::/job_42\n")
    (root / "job_42" / "memory.max").write_text("8589934592\n")
    assert memory.cgroup_limit(root, own) == 8 * 2**30
    (root / "job_42" / "memory.max").write_text("max\n")
    assert memory.cgroup_limit(root, own) is None
    # v1: the memory controller's own tree; its 'no limit' is a number near 2^63
    own.write_text("12:cpu,cpuacct:/job_7\n11:memory:/job_7\n")
    (root / "memory" / "job_7").mkdir(parents=True)
    (root / "memory" / "job_7" / "memory.limit_in_bytes").write_text("4294967296\n")
    assert memory.cgroup_limit(root, own) == 4 * 2**30
    (root / "memory" / "job_7" / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    assert memory.cgroup_limit(root, own) is None
    assert memory.cgroup_limit(root, tmp_path / "missing") is None
    # Slurm's v2 tree: the job's limit on job_9, its step's and task's groups below it at 'max'
    own.write_text("0::/system.slice/slurmstepd.scope/job_9/step_0/user/task_0\n")
    task = root / "system.slice" / "slurmstepd.scope" / "job_9" / "step_0" / "user" / "task_0"
    task.mkdir(parents=True)
    for group in (task, task.parent, task.parent.parent):
        (group / "memory.max").write_text("max\n")
    (root / "system.slice" / "slurmstepd.scope" / "job_9" / "memory.max").write_text("2147483648\n")
    assert memory.cgroup_limit(root, own) == 2 * 2**30


def test_the_address_space_limit_is_one_of_the_limits_where_it_is_set():
    """In a child process of its own, whose soft limit is lowered to 6 GiB."""
    code = (
        "import resource; resource.setrlimit(resource.RLIMIT_AS, (6 * 2 ** 30, resource.RLIM_INFINITY)); "
        "from deepdensity.training import memory; "
        "print([(l.bytes, l.address_space) for l in memory.limits() if l.address_space])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert out.strip() == f"[({6 * 2**30}, True)]"


def test_the_estimate_adds_what_a_run_holds_worked_by_hand(monkeypatch):
    """K = 100,000 at 32 samples a pass, latent 16, on TF 2.21, under 7.63 GiB of address space
    (ulimit -v 8000000): TensorFlow's 1.5e9 B + the rendering 32 x 100,000 x 2680 B = 8.576e9 B
    + the heads' 100,000 x 10 x 17 weights x 16 B = 2.72e8 B, and 1 MiB held: 10.349e9 B,
    9.64 GiB."""
    monkeypatch.setattr(memory, "limits", lambda: [Limit(8_000_000 * 1024, "the limit", True)])
    monkeypatch.setattr(memory, "on_a_gpu", lambda: False)
    cfg = load(str(SMOKE), ["n_components=100000"])
    line = memory.check(cfg, 32, 2**20, (2, 21), "do less")
    need = 1.5e9 + 32 * 100_000 * 2680 + 100_000 * 10 * 17 * 16 + 2**20
    assert line.startswith(
        f"n_components = 100000 at 32 samples a pass needs at least {size_text(need)} of address space"
    ) and line.endswith("the limit is 7.63 GiB; do less")
    assert size_text(need) == "9.64 GiB"
    # XLA or not: TF 2.21 reserves the same
    assert memory.check(load(str(SMOKE), ["n_components=100000", "xla=off"]), 32, 2**20, (2, 21), "") == line[:-7]
    # TensorFlow 2.15 needs no more than it keeps resident, 1390 B a sample and component: 6.22e9 B fits
    assert memory.check(cfg, 32, 2**20, (2, 15), "") is None
    # rendering with TensorFlow's ops stores a (B, K, V) float32 tensor: 52 GB more at K = 100,000
    stored = load(str(SMOKE), ["n_components=100000", "rendering=tf"])
    assert (
        memory.rendering_need(stored, 32, False)[0] - memory.rendering_need(cfg, 32, False)[0]
        == 32 * 100_000 * 4096 * 4
    )
    # on 8^3 cubes the working set is an eighth of 16^3's (the growth measured there, scaled)
    small = memory.rendering_need(cfg, 32, True, voxels=8**3)[0] - 100_000 * 10 * 17 * 16
    assert small == 32 * 100_000 * 2680 / 8
    # the paper's model at its batch fits anywhere TensorFlow does
    assert memory.check(load(None, []), 32, 2**20, (2, 21), "") is None
    # a GPU holds the rendering: only TensorFlow's own and what the run holds are counted here
    monkeypatch.setattr(memory, "on_a_gpu", lambda: True)
    assert memory.check(cfg, 32, 2**20, (2, 21), "") is None


@pytest.mark.medium
def test_the_heads_weights_are_the_models_own_count():
    """An independent count: Keras' own, of the model the run builds."""
    from deepdensity.model.autoencoder import build_model

    for k, latent in ((50, 64), (1000, 16)):
        model = build_model(load(str(SMOKE), [f"n_components={k}", f"latent_dim={latent}"]))
        heads = sum(model.get_layer(name).count_params() for name in ("alpha", "mu_dense", "sigma_dense", "rho_dense"))
        assert memory.heads_weights(k, latent) == heads


def test_a_folder_left_by_a_run_that_died_unsaid_is_told_and_one_stopped_in_order_is_not(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "config.json").write_text("{}")
    (out / "metrics.jsonl").write_text("")
    assert runs.died_unsaid(out) is None, "stopped before its first epoch, in order: nothing to tell"
    (out / runs.RUNNING_MARK).write_text("{}")
    assert runs.died_unsaid(out).startswith(
        f"{out}: the last run here ended without a word before finishing its first epoch"
    )
    (out / "metrics.jsonl").write_text('{"epoch": 1, "loss": 0.1, "val_loss": 0.1}\n')
    (out / "state.json").write_text('{"epoch": 0}')
    assert runs.died_unsaid(out) is None, "an epoch on record: --resume goes on from it"


def _limited(gib_kb: int):
    return lambda: resource.setrlimit(resource.RLIMIT_AS, (gib_kb * 1024, resource.RLIM_INFINITY))


@pytest.mark.slow
@pytest.mark.smoke
def test_a_process_drops_its_own_running_mark_and_never_anothers(tmp_path):
    """A run's end removes the mark its process wrote, and rank 0's line watcher, having said
    the line for it, the mark of that rank (remove_pid_mark): never the mark of another pid (a
    process training there, or one that died without a word), nor one that does not read,
    which stay for the next invocation to judge."""
    mark = tmp_path / runs.RUNNING_MARK
    mine, anothers = json.dumps({"pid": os.getpid()}), json.dumps({"pid": os.getpid() + 1})
    for text, kept in [(mine, False), (anothers, True), ("{", True), ("[1]", True)]:
        mark.write_text(text)
        runs.drop_own_mark(tmp_path)
        assert mark.exists() == kept, text
    for text, kept in [(anothers, False), (mine, True)]:
        mark.write_text(text)
        remove_pid_mark(mark, os.getpid() + 1)  # the watcher, for its rank's pid
        assert mark.exists() == kept, text
    mark.unlink()
    runs.drop_own_mark(tmp_path)  # no mark: nothing to do
    assert not mark.exists()


def test_a_model_too_big_for_the_address_space_trains_or_is_refused_in_one_line(tmp_path, smoke_data):
    """Issue 70's run: K = 100,000 under `ulimit -v 8000000`. TF 2.21 aborted in std::bad_alloc
    (exit 134) after making its folder; TF 2.15 trains its epoch. Either way now: it trains, or
    it is refused in one line with exit 2 before any folder is made."""
    out = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "train.py",
            "--mode",
            "strong",
            "--config",
            str(SMOKE),
            "--set",
            f"data_path={smoke_data}",
            "--set",
            "n_components=100000",
            "--set",
            "max_epochs=1",
            "--set",
            "max_train_cubes=32",
            "--out",
            str(out),
            "--quiet",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        preexec_fn=_limited(8_000_000),
        timeout=1800,
    )
    said = [line for line in proc.stderr.splitlines() if line.strip()]
    if proc.returncode == 2:
        assert len(said) == 1 and said[0].startswith(
            "error: n_components = 100000 at 32 samples a pass needs at least"
        ), proc.stderr
        assert not out.exists(), "refused before its folder"
    else:
        assert proc.returncode == 0 and (out / "result.json").exists(), proc.stderr[-3000:]


@pytest.mark.slow
def test_the_next_run_in_a_folder_whose_run_was_killed_before_its_first_epoch_says_so(tmp_path, smoke_data):
    """SIGKILL (as the kernel's OOM killer sends) once config.json is written: no handler runs.
    The same command again says what happened in one line, then trains."""
    out = tmp_path / "run"
    command = [
        sys.executable,
        "train.py",
        "--mode",
        "strong",
        "--config",
        str(SMOKE),
        "--set",
        f"data_path={smoke_data}",
        "--set",
        "max_epochs=1",
        "--out",
        str(out),
    ]
    first = subprocess.Popen(
        [*command, "--set", "max_epochs=400"], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 300
    while not (out / "config.json").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    first.send_signal(signal.SIGKILL)
    first.wait()
    assert (out / runs.RUNNING_MARK).exists() and not (out / "state.json").exists()
    again = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    told = [line for line in again.stdout.splitlines() + again.stderr.splitlines() if "ended without a word" in line]
    assert len(told) == 1 and told[0].startswith(f"{out}: the last run here"), again.stdout + again.stderr
    assert not (out / runs.RUNNING_MARK).exists(), "this run ended in order"
