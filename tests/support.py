"""What several test modules share: the repository's root, the smoke config, a
subprocess runner with this interpreter's environment, and a stand-in for the study's runner."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SMOKE = str(ROOT / "configs" / "smoke.yaml")


# Set by conftest for the test that is running: is it marked slow?
CURRENT_TEST_IS_SLOW = False
# What makes a command slow: training, a study, Horovod's launcher, in every spelling a user has
# (train.py, python -m deepdensity train, python -m deepdensity.training.cli, ...).
SLOW_COMMANDS = (
    "train.py",
    "horovodrun",
    "deepdensity.repro",
    "deepdensity.filter",
    "deepdensity.bench",
    "deepdensity train",
    "deepdensity repro",
    "deepdensity filter",
    "deepdensity bench",
    "deepdensity.training.cli",
    "deepdensity.study.repro",
    "deepdensity.tools.filter",
    "deepdensity.perf.bench",
    "deepdensity launch",
    "deepdensity.launch.horovodrun",
    "deepdensity.perf.rank_probes",
)


def is_slow(args) -> bool:
    """Does this command train, run a study or launch Horovod? (Read from the whole command
    line, so that `python -m deepdensity train` counts as `train.py` does.)"""
    line = " ".join(str(a) for a in args)
    return any(word in line for word in SLOW_COMMANDS)


def users_env() -> dict:
    """This process's environment without what importing deepdensity set in it: a command
    started from a user's shell must set TF_USE_LEGACY_KERAS itself (deepdensity/__init__.py),
    not inherit it from pytest's process."""
    return {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}


def assert_keras2(config: dict) -> None:
    """The process that trained a run (its config.json) had Keras 2 as tf.keras: tf_keras from
    TensorFlow 2.16 on, TensorFlow's own keras 2.15 before."""
    from deepdensity.utils.stack import release

    versions = config["versions"]
    top, version = versions["keras"].split()
    assert release(version)[:1] == (2,), versions
    assert top == ("tf_keras" if release(versions["tensorflow"]) >= (2, 16) else "keras"), versions


def prose(text: str) -> str:
    """A rendered report's text with every line break and run of spaces as one space: what a
    Markdown reader shows of it, whatever width its prose was wrapped to (report/render.py's
    wrap_prose); table rows read as they are."""
    return " ".join(text.split())


def run(args, cwd=ROOT, timeout=600, check=True):
    """Run a command with this interpreter's environment; returns CompletedProcess.
    A training or Horovod command is refused in a test not marked slow, so that the fast
    tier stays fast by construction."""
    if not CURRENT_TEST_IS_SLOW and is_slow(args):
        raise AssertionError(f"{args[:3]}... trains or launches Horovod: mark the test @pytest.mark.slow")
    env = {**users_env(), "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{args} exited {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
        )
    return proc


def losses(out):
    """(loss, val_loss, lr) of each epoch of a run folder."""
    import json

    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    return [(r["loss"], r["val_loss"], r["lr"]) for r in rows]


def launch(prefix, mode, out, data, *extra):
    """Train the smoke config on `data` into `out`, under the launcher words `prefix` (none: one
    process); returns its losses."""
    run(
        prefix
        + [
            sys.executable,
            str(ROOT / "train.py"),
            "--mode",
            mode,
            "--config",
            SMOKE,
            "--set",
            f"data_path={data}",
            "--out",
            str(out),
            "--quiet",
            *extra,
        ]
    )
    return losses(out)


def tiny_clock() -> dict:
    """The clock of a tiny study measured once (tests/study/data/tiny-reports), stamped with this
    checkout's clock version (the fixture's own, until the clock changes): a tiny study whose runs folder
    holds it as timing.json measures no clock of
    its own (the clock is not what such a test is about)."""
    import json

    from deepdensity.study.run.timing import CLOCK_VERSION

    record = json.loads((ROOT / "tests" / "study" / "data" / "tiny-reports" / "study.json").read_text())
    return {**record["timing"], "clock_version": CLOCK_VERSION}


def kept_round(timing: dict, n_val: int) -> dict:
    """A round of the clock as timing.measure_round keeps it, from the figures of a tiny clock
    (tiny_clock), built from its combined figures rather than copied from its rounds, so that it
    holds every key a round of this checkout has: a rank's step at strong scaling's per-worker batch (the
    tiny presets' batch 32 over N), and the real epoch less its evaluation."""
    steps = timing["step_seconds"]
    real = timing["real_epoch_seconds"]
    return {
        "steps": steps,
        "eval": timing["eval_per_sample_s"],
        "shared": {n: steps[str(32 // int(n))] for n in ("2", "4")},
        "allreduce": {n: timing["allreduce_seconds"][n] for n in ("2", "4")},
        "real": real,
        "real_steps": {n: s - timing["eval_per_sample_s"] * n_val for n, s in real.items()},
    }


def seed_kept_rounds(preset: Path, runs: Path, count: int) -> list:
    """Leave in `runs` what a study's clock interrupted after `count` rounds leaves:
    timing-rounds.json with `count` rounds of tiny_clock(), under the settings the study computes
    (timing.round_settings: the digest of the train.yaml it writes, session.run_settings, and
    this machine's CPU). The study then measures only the rounds left, for real; the
    kept rounds are returned. Used where a test needs a study's clock measured, not three times."""
    import json

    import yaml

    from deepdensity.study.core.preset import load_study
    from deepdensity.study.run.session import run_settings
    from deepdensity.study.run.timing import ROUNDS_FILE, round_settings

    _, study = load_study(str(preset))
    runs.mkdir(parents=True, exist_ok=True)
    train_yaml = runs / "train.yaml"
    train_yaml.write_text(yaml.safe_dump(run_settings(study, runs / "data.h5")))
    rounds = [kept_round(tiny_clock(), study.data["val"])] * count
    (runs / ROUNDS_FILE).write_text(json.dumps({"settings": round_settings(train_yaml), "rounds": rounds}))
    return rounds


def horovodrun():
    exe = Path(sys.executable).with_name("horovodrun")
    return str(exe) if exe.exists() else shutil.which("horovodrun")


def fed_through(make_filter, text: str) -> tuple:
    """(what a launcher's output filter lets through, the exit code it read) for `text` fed to
    it line by line, as `deepdensity launch` feeds horovodrun's or mpirun's output."""
    said = []
    line_filter = make_filter(said.append)
    for line in text.splitlines(keepends=True):
        line_filter.feed(line)
    line_filter.flush()
    return "".join(said), line_filter.exit_code


class FakeRunner:
    """Stands in for StudyRunner: writes a run's metrics from a loss curve of (lr, seed, epoch)."""

    parallel = 1

    def __init__(self, root, curve):
        self.root, self.curve, self.calls = root, curve, []

    def run_all(self, jobs, label=""):
        return [job() for job in jobs]

    def run(self, name, mode, n, settings, need_weights=False):
        import json

        from deepdensity.scaling import rules  # here: importing the package sets TensorFlow's log level

        self.calls.append((name, settings["max_epochs"]))
        out = self.root / name
        out.mkdir(parents=True, exist_ok=True)
        lr, patience = float(settings["base_lr"]), int(settings.get("stall_patience", 0))
        vals = []
        for e in range(int(settings["max_epochs"])):
            vals.append(self.curve(lr, settings["seed"], e))
            if rules.StoppingRules(float(settings["target_loss"]), 10**6, patience).reason(e, vals[-1], vals[-1], vals):
                break
        (out / "metrics.jsonl").write_text(
            "".join(json.dumps({"epoch": i + 1, "val_loss": v}) + "\n" for i, v in enumerate(vals))
        )
        return {"status": "max_epochs", "epochs": len(vals)}


# Folders of a user's that a command's --out or --runs may be pointed at by mistake: the
# class tests/utils/test_files.py and tests/test_foreign_folders.py try every member of.
def user_folder(root, name: str, entries: dict):
    """A folder of the user's: {relative path: bytes, or None for a subfolder}."""
    folder = root / name
    folder.mkdir()
    for rel, data in entries.items():
        path = folder / rel
        if data is None:
            path.mkdir(parents=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
    return folder


def snapshot(folder) -> dict:
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None) for p in sorted(folder.rglob("*"))}


USERS_FOLDERS = {
    "notes": {"notes.txt": b"mine"},
    "their_run_files": {"config.json": b'{"lr": 0.1}', "weights.h5": b"\x89HDF\r\n"},
    "their_config_and_metrics": {"config.json": b'{"mode": "mine"}', "metrics.jsonl": b'{"epoch": 1}\n'},
    "a_subfolder": {"scans": None},
    "a_hidden_file": {".git": None},
    "a_mark_not_ours": {".deepdensity": b"my own dotfile"},
    "a_run_folder_of_theirs_named_like_ours": {"config.json": b"[1, 2]", "state.json": b"{}"},
}
