"""Ctrl-C and SIGTERM in the middle of a run: one line that says where the run stands and the
command that continues it, exit 130 or 143, no traceback, a run folder that resumes; and a
run stopped between its last checkpoint and its weights is finished by --resume."""

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import ROOT, SMOKE, run, tiny_clock

TF_LOG_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWEF] |[IWEF]\d{4} |WARNING: All log messages)")


def start(out, data, max_epochs=6):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "train.py"),
            "--mode",
            "strong",
            "--config",
            SMOKE,
            "--set",
            f"data_path={data}",
            "--set",
            f"max_epochs={max_epochs}",
            "--out",
            str(out),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
        # a shell that runs us in the background ignores SIGINT, and a child would
        # inherit that: give the run the default disposition a terminal's job has
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


@pytest.mark.slow
@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_ends_a_run_in_one_line_and_the_line_continues_it(tmp_path, smoke_data, signum, code):
    out = tmp_path / "run"
    proc = start(out, smoke_data)
    for line in proc.stdout:  # wait for the first finished epoch
        if line.startswith("epoch    1"):
            break
    proc.send_signal(signum)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == code, stderr
    # TensorFlow's C++ logger writes a few lines of its own (XLA's, with a timestamp or an absl
    # prefix); everything else on stderr is ours
    lines = [x for x in stderr.splitlines() if x.strip() and not TF_LOG_LINE.match(x)]
    assert len(lines) == 1 and lines[0].startswith("interrupted: at epoch "), stderr
    assert "Traceback" not in stderr
    assert not list(out.glob("**/*.tmp*")), "no temporary file left behind"
    command = lines[0].split("continue with: ", 1)[1]
    assert command.startswith("python train.py ") and command.endswith("--resume")
    again = run([sys.executable] + shlex.split(command)[1:])
    assert "stopped at the epoch cap (6) after 6 epochs" in again.stdout
    epochs = [json.loads(x)["epoch"] for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert epochs == [1, 2, 3, 4, 5, 6], "each epoch once, none lost, none twice"


@pytest.mark.slow
def test_resume_finishes_a_run_stopped_between_its_last_checkpoint_and_its_weights(tmp_path, smoke_run, smoke_data):
    out = tmp_path / "run"
    shutil.copytree(smoke_run, out)
    finished = json.loads((out / "result.json").read_text())
    (out / "weights.h5").unlink()
    (out / "result.json").unlink()
    state = json.loads((out / "state.json").read_text())
    (out / "state.json").write_text(json.dumps({**state, "status": "running"}))
    proc = run(
        [
            sys.executable,
            str(ROOT / "train.py"),
            "--mode",
            "strong",
            "--config",
            SMOKE,
            "--set",
            f"data_path={smoke_data}",
            "--set",
            "max_epochs=1",
            "--out",
            str(out),
            "--resume",
        ]
    )
    assert "stopped at the epoch cap (1) after 1 epoch" in proc.stdout
    result = json.loads((out / "result.json").read_text())
    assert (result["status"], result["epochs"], result["final_val_loss"]) == (
        finished["status"],
        finished["epochs"],
        finished["final_val_loss"],
    )
    assert (out / "weights.h5").stat().st_size > 0
    assert json.loads((out / "state.json").read_text())["status"] == "max_epochs"


@pytest.mark.slow
def test_a_second_process_training_into_a_held_run_folder_is_refused_with_the_holders_pid(tmp_path, smoke_data):
    out = tmp_path / "run"
    first = start(out, smoke_data, max_epochs=500)  # still training when the second one starts
    try:
        for line in first.stdout:
            if line.startswith("epoch    1"):
                break
        second = run(
            [
                sys.executable,
                str(ROOT / "train.py"),
                "--mode",
                "strong",
                "--config",
                SMOKE,
                "--set",
                f"data_path={smoke_data}",
                "--out",
                str(out),
                "--resume",
            ],
            check=False,
        )
        assert second.returncode == 2
        assert (
            second.stderr.strip().splitlines()[-1]
            == f"error: {out} is in use by another training process (pid {first.pid}); wait for it to end, "
            f"or pass another --out"
        )
    finally:
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=120)
    epochs = [json.loads(x)["epoch"] for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert epochs == list(range(1, len(epochs) + 1)), "one run's epochs only"


def _alive(marker: str) -> list:
    """Pids of processes whose command line names `marker` (a test's own run folder)."""
    out = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout
    return [int(p) for p in out.split() if int(p) != os.getpid()]


@pytest.mark.slow
def test_ctrl_c_under_horovodrun_keeps_the_run_and_leaves_no_worker(tmp_path, smoke_data):
    """A terminal's Ctrl-C reaches horovodrun and both ranks: rank 0 says once where the run
    stands, no rank is left running, and the folder resumes with each epoch once."""
    from deepdensity.launch import controllers
    from tests.support import horovodrun

    out = tmp_path / "hvd-run"
    # enough epochs to be interrupted in: a smoke epoch takes 0.15 s, and under MPI the whole
    # run of 6 was over before its "epoch 1" line had come through mpirun
    cap = 40
    cmd = [
        horovodrun(),
        "-np",
        "2",
        sys.executable,
        str(ROOT / "train.py"),
        "--mode",
        "strong",
        "--config",
        SMOKE,
        "--set",
        f"data_path={smoke_data}",
        "--set",
        f"max_epochs={cap}",
        "--out",
        str(out),
    ]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"},
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if "epoch    1" in line:
            break
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal does: the whole foreground group
    rest, _ = proc.communicate(timeout=180)
    text = "".join(seen) + rest
    assert proc.returncode != 0, text
    said = [x for x in text.splitlines() if "interrupted: at epoch" in x]
    # horovodrun runs the ranks under MPI where it is built, else under Gloo, which the line names
    launch = "horovodrun -np 2" if "mpi" in controllers.built(horovodrun()) else "horovodrun --gloo -np 2"
    assert len(said) == 1 and f"continue with: {launch} python train.py" in said[0], text
    assert _alive(str(out)) == [], "no rank left running"
    # TensorFlow's start-up lines once for the job, from rank 0, not once per rank. Untagged ones
    # are horovodrun's own process, which imports TensorFlow for its MPI build check: from
    # TensorFlow 2.17 those come through an absl no variable reaches (`deepdensity launch` drops them)
    from deepdensity.utils.stack import found, release

    tag = re.compile(r"^\[(?:\d+,)?(\d+)\]<")
    for noise in ("Compiled cluster using XLA", "All log messages before absl::InitializeLog"):
        noisy = [(tag.match(x), x) for x in text.splitlines() if noise in x]
        assert not [x for m, x in noisy if m and m[1] != "0"], text
        assert not [x for m, x in noisy if not m] or release(found().tensorflow) >= (2, 17), text
    # resume as a user would: paste what was printed, in the project folder, with the
    # environment's python and horovodrun first on PATH (an activated venv)
    pasted = shlex.split(said[0].split("continue with: ", 1)[1])
    assert pasted[: len(launch.split()) + 1] == [*launch.split(), "python"] and pasted[-1] == "--resume", pasted
    venv_path = f"{Path(horovodrun()).parent}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    again = subprocess.run(
        pasted,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PATH": venv_path, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"stopped at the epoch cap ({cap}) after {cap} epochs" in again.stdout
    epochs = [json.loads(x)["epoch"] for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert epochs == list(range(1, cap + 1)), "each epoch once, none lost, none twice"


@pytest.mark.slow
def test_sigterm_to_a_study_stops_its_runs_and_the_study_continues_afterwards(tmp_path):
    """A scheduler's SIGTERM to `make repro` alone: the study forwards it to its runs, waits for
    them, exits 143, and its rerun finds every run folder consistent."""
    preset = tmp_path / "tiny.yaml"
    preset.write_text(
        "data: {n: 96, val: 32, seed: 0}\ntrain: {n_components: 4, conv_filters: [4, 4, 4], "
        "latent_dim: 8, xla: 'off'}\ncalibration_epochs: 6\nworkers: [1, 2]\nmodes: [strong, weak]\n"
        "seeds: [0]\nbase_lr: 0.00105\n"
    )
    runs = tmp_path / "study-runs"
    # the study trains its own runs, to be interrupted in one; it measures no clock (the clock's
    # own interruption is the Slurm clock job's test): its runs folder holds a measured one
    runs.mkdir()
    (runs / "timing.json").write_text(json.dumps(tiny_clock()))
    cmd = [
        sys.executable,
        "-m",
        "deepdensity.repro",
        "--preset",
        str(preset),
        "--runs",
        str(runs),
        "--reports",
        str(tmp_path / "reports"),
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    for line in proc.stdout:
        if "[run 1] seq-s0" in line:
            break
    deadline = time.monotonic() + 120
    metrics = runs / "seq-s0" / "metrics.jsonl"
    while not (metrics.exists() and metrics.read_text()) and time.monotonic() < deadline:
        time.sleep(0.2)  # until the run has finished an epoch
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 143, stderr
    assert "Traceback" not in stderr
    assert _alive(str(runs)) == [], "no training run left behind"
    # the line says how to go on, and the reports folder was never touched by the partial study
    assert (
        f"finished runs are kept in {runs} and reused" in stderr
        and "continue with `python -m deepdensity.repro" in stderr
    ), stderr
    assert not (tmp_path / "reports").exists()
    again = run(cmd)
    assert "reports written to" in again.stdout
    assert (tmp_path / "reports" / "REPORT.md").is_file() and not (runs / "reports.partial").exists()


def _mpirun_of(launcher_pid: int) -> int:
    """mpirun's pid: the child of the shell plain horovodrun became."""
    children = subprocess.run(["pgrep", "-P", str(launcher_pid)], capture_output=True, text=True).stdout.split()
    assert len(children) == 1, children
    return int(children[0])


# how the process a user started is stopped, one after the other: a closed terminal's SIGHUP to
# its process group (the shell horovodrun became and mpirun; the ranks have groups of their
# own), SIGTERM to mpirun. A SIGTERM or SIGHUP to horovodrun alone, and Ctrl-C, at eight moments:
# tests/training/test_ctrl_c.py's plain-mpi chain
PLAIN_MPI_STOPS = [
    ("SIGHUP to its group", lambda pid: os.killpg(pid, signal.SIGHUP)),
    ("SIGTERM to mpirun", lambda pid: os.kill(_mpirun_of(pid), signal.SIGTERM)),
]


@pytest.mark.slow
def test_plain_horovodrun_under_mpi_stopped_leaves_no_rank_and_says_how_to_continue(tmp_path, smoke_data):
    """The README's own command under MPI: horovodrun becomes `/bin/sh -c mpirun ...`, and before
    training/launcher_watch.py a SIGTERM to it left mpirun and both ranks training in the
    background. Each stop of the chain: rank 0's one line with the command that continues the
    run, no process of the run left within seconds; each continue pastes that command; the last,
    left alone, ends at the cap with every epoch once. It trains a run of its own: the shared
    smoke run is finished, and this one must be stopped twice on the way."""
    from deepdensity.launch import controllers
    from tests.support import horovodrun

    if "mpi" not in controllers.built(horovodrun()):
        pytest.skip("Horovod is built without MPI here")
    out = tmp_path / "plain-mpi"
    cap = 16  # more than the chain uses up: each stop comes after its start's first epoch line
    venv_path = f"{Path(horovodrun()).parent}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    env = {**os.environ, "PATH": venv_path, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    cmd = [
        "horovodrun",
        "-np",
        "2",
        "python",
        "train.py",
        "--mode",
        "strong",
        "--config",
        SMOKE,
        "--set",
        f"data_path={smoke_data}",
        "--set",
        f"max_epochs={cap}",
        "--out",
        str(out),
    ]
    for how, stop in PLAIN_MPI_STOPS:
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT, env=env, start_new_session=True
        )
        seen = []
        for line in proc.stdout:
            seen.append(line)
            if re.search(r"^\[1,0\]<stdout>:epoch +\d+ ", line):  # an epoch trained by this start
                break
        stop(proc.pid)
        rest, _ = proc.communicate(timeout=120)
        text = "".join(seen) + rest
        deadline = time.time() + 10
        while _alive(str(out)) and time.time() < deadline:
            time.sleep(0.2)
        assert _alive(str(out)) == [], f"{how}: a process of the run was left running\n{text}"
        said = [x for x in text.splitlines() if "interrupted: at epoch" in x]
        assert len(said) == 1 and said[0].startswith("[1,0]<stderr>:"), f"{how}:\n{text}"
        cmd = shlex.split(said[0].split("continue with: ", 1)[1])
        assert cmd[:4] == ["horovodrun", "-np", "2", "python"] and cmd[-1] == "--resume", cmd
    again = subprocess.run(
        cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, env={**env, "TF_CPP_MIN_LOG_LEVEL": "2"}
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"stopped at the epoch cap ({cap}) after {cap} epochs" in again.stdout
    epochs = [json.loads(x)["epoch"] for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert epochs == list(range(1, cap + 1)), "each epoch once, none lost, none twice"


def _importing_tensorflow(pid: int) -> bool:
    """Has the process begun importing TensorFlow (its library mapped)?"""
    try:
        return "libtensorflow" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


@pytest.mark.slow
@pytest.mark.parametrize("after", [0.0, 0.4, 1.2, 2.5])
def test_ctrl_c_while_the_process_imports_tensorflow_is_one_interrupted_line(tmp_path, smoke_data, after):
    """Issue 70: a Ctrl-C that landed inside an import came back as CPython's SystemError in 1
    of 15 interrupts of a chain. Ctrl-C at moments after TensorFlow's library is mapped, while
    its modules (and TensorFlow's own imports of others) are still being imported: the one
    interrupted line, exit 130, no traceback and no "Exception ignored"."""
    out = tmp_path / "run"
    proc = start(out, smoke_data)
    deadline = time.monotonic() + 120
    while not _importing_tensorflow(proc.pid) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    time.sleep(after)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    lines = [x for x in stderr.splitlines() if x.strip() and not TF_LOG_LINE.match(x)]
    assert proc.returncode == 130 and len(lines) == 1 and lines[0].startswith("interrupted: "), stderr
    assert "Traceback" not in stderr and "Exception ignored" not in stderr and "Error" not in stderr, stderr


# a rank's first lines as train.py's, then 60 s that stand for its imports: calls into C (as
# TensorFlow's library loads, 0.3-1.2 s here) that hold a signal back until they return
RANK_IMPORTING = """
import signal, sys, time
from deepdensity.training import interrupts
interrupts.hold_early(sys.argv[1:])
print("importing", flush=True)
for _ in range(1200):
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    time.sleep(0.05)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
"""


def interrupted_mpirun(script: str, args: list, cwd, ready: str) -> str:
    """`mpirun -np 2` of stand-in ranks (python -c `script` `args`), Ctrl-C'd (SIGINT to mpirun)
    once both have printed `ready`: all it wrote, stdout and stderr together."""
    if shutil.which("mpirun") is None:
        pytest.skip("no mpirun here")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("HOROVOD_", "OMPI_", "DEEPDENSITY_"))},
        "PYTHONPATH": str(ROOT),
    }
    proc = subprocess.Popen(
        ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", sys.executable, "-c", script, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=cwd,
    )
    started = [proc.stdout.readline() for _ in range(2)]
    assert all(ready in x for x in started), started
    proc.send_signal(signal.SIGINT)
    return proc.communicate(timeout=60)[0]


@pytest.mark.slow
def test_mpirun_interrupted_while_its_ranks_import_passes_rank_0s_line_on_every_time(tmp_path):
    """Issue 70, seen in CI: Ctrl-C to plain horovodrun under MPI while the ranks imported, and
    nothing but '^C' on the screen. mpirun, interrupted, SIGTERMs its ranks 1 s later, and once it
    has seen one end it drops what the others write: rank 1, done first, took rank 0's line with
    it (interrupts.stay_for_rank_0). Ten interrupts of a real mpirun whose ranks each take the
    signal up to 0.05 s late: rank 0's line every time, and nothing else."""
    out = tmp_path / "run"
    args = ["--mode", "strong", "--out", str(out)]
    said = [interrupted_mpirun(RANK_IMPORTING, args, tmp_path, "importing") for _ in range(10)]
    line = (
        "interrupted: no epoch finished; start again with the same command: "
        f"horovodrun -np 2 python train.py --mode strong --out {out}"
    )
    assert [text.strip() for text in said] == [line] * 10


# a rank whose main thread is held in C: a default pthread mutex locked twice, which no signal
# ends, standing for TensorFlow's C++ (the first step's graph optimised and run on a loaded host).
# Held at its first step, as fit's TakeSignals leaves it (a window where the handler raises at
# once), or, with "held" as its first word, at an epoch's end (a held section: the row and the
# checkpoint being written). With "gil", the mutex is locked through ctypes.PyDLL, which keeps
# Python's lock (GIL) through the call: no thread of the rank runs, as in the stretches of
# `import tensorflow` that run in C holding it. Rank 1 goes on in Python and takes the signal.
RANK_HELD_IN_C = """
import ctypes, sys, time
from deepdensity.training import cli, interrupts
from deepdensity.utils.errors import Interrupted, launcher_rank
where, words = sys.argv[1], sys.argv[2:]
out = words[words.index("--out") + 1]
with interrupts.handling(restore=False):
    interrupts.last_word(lambda: cli.where_to_continue(out, words), None)
    print("stepping", flush=True)
    try:
        if launcher_rank() == 0:
            interrupts.hold() if where == "held" else interrupts.open_window()
            mutex = ctypes.create_string_buffer(64)
            libc = ctypes.PyDLL(None) if where == "gil" else ctypes.CDLL(None)
            libc.pthread_mutex_lock(mutex)
            libc.pthread_mutex_lock(mutex)
        while True:
            time.sleep(0.05)
            interrupts.take_pending()
    except Interrupted as e:
        interrupts.stay_for_rank_0(e.code)
        sys.exit(e.code)
"""


@pytest.mark.slow
def test_rank_0_held_in_c_past_mpiruns_kill_still_says_where_the_run_stands(tmp_path):
    """Issue 70, seen in CI: the chain's Ctrl-C just as a resumed run's ranks started under plain
    horovodrun with MPI left a bare '^C'. rank 0 was inside TensorFlow's C++ (its first step),
    where no Python handler runs, when mpirun SIGKILLed it 1 s after its SIGTERM
    (interrupts.last_word). Interrupts of a real mpirun whose rank 0 is held in C: at its first
    step, rank 0's line each time, from its run folder's checkpoint, and nothing else, also when
    the C it is held in keeps Python's lock (no thread of the rank could say it); in the middle
    of an epoch's end, nothing: what it writes there is never cut short, and mpirun's kill comes
    first."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "state.json").write_text(json.dumps({"epoch": 2, "checkpoint": "ckpt/epoch-0003", "status": "running"}))
    said = [
        interrupted_mpirun(RANK_HELD_IN_C, [where, "--mode", "strong", "--out", str(out)], tmp_path, "stepping")
        for where in ("step", "gil", "gil", "held")
    ]
    line = (
        f"interrupted: at epoch 3, checkpointed in {out}; continue with: "
        f"horovodrun -np 2 python train.py --mode strong --out {out} --resume"
    )
    assert [text.strip() for text in said] == [line, line, line, ""]
