"""The command table: `deepdensity <command>` reaches every tool, every entry point answers
--help, and every flag with a default shows it."""

import importlib
import subprocess
import sys

import pytest

from deepdensity import cli
from tests.support import ROOT

ENTRY_POINTS = [
    ("deepdensity.training.cli", []),
    ("deepdensity.data.cli", []),
    ("deepdensity.data.cli", ["synth"]),
    ("deepdensity.data.cli", ["prepare"]),
    ("deepdensity.data.cli", ["synth-scans"]),
    ("deepdensity.study.repro", []),
    ("deepdensity.perf.bench", []),
    ("deepdensity.tools.encode", []),
    ("deepdensity.tools.generate", []),
    ("deepdensity.tools.filter", []),
    ("deepdensity.tools.plot", []),
    ("deepdensity.study.rerender", []),
    ("deepdensity.perf.rank_probes", []),
    ("deepdensity.launch.horovodrun", []),
]


def help_text(module: str, sub: list, capsys) -> str:
    mod = importlib.import_module(module)
    main = getattr(mod, "probe_main", None) or mod.main
    with pytest.raises(SystemExit) as e:
        main(sub + ["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage:"), out[:200]
    return out


@pytest.mark.parametrize("module, sub", ENTRY_POINTS)
def test_every_entry_point_answers_help(module, sub, capsys):
    help_text(module, sub, capsys)


@pytest.mark.parametrize(
    "module, sub, flags",
    [
        ("deepdensity.tools.generate", [], ["--scheme", "--seed", "--batch", "--noise", "--t-min"]),
        ("deepdensity.tools.encode", [], ["--split", "--batch"]),
        ("deepdensity.perf.bench", [], ["--config", "--out", "--repeats", "--pairs"]),
        ("deepdensity.training.cli", [], ["--emulate-workers"]),
        ("deepdensity.data.cli", ["synth"], ["--n", "--val", "--seed", "--cube", "--spacing"]),
        ("deepdensity.data.cli", ["synth-scans"], ["--n", "--seed", "--format"]),
    ],
)
def test_flags_with_a_default_show_it(module, sub, flags, capsys):
    entries, current = {}, None
    for line in help_text(module, sub, capsys).splitlines():
        if line.startswith("  -"):  # a flag's entry starts; wrapped lines are indented more
            current = line.split()[0].rstrip(",")
            entries[current] = line
        elif current and line.startswith("    "):
            entries[current] += " " + line.strip()
        else:
            current = None
    for flag in flags:
        assert "(default:" in " ".join(entries[flag].split()), (flag, entries[flag])


def test_the_train_help_prints_its_description_once(capsys):
    text = help_text("deepdensity.training.cli", [], capsys)
    assert text.count("Train the DeepDensity autoencoder") == 1


def test_python_m_deepdensity_lists_every_command_and_refuses_an_unknown_one():
    out = subprocess.run([sys.executable, "-m", "deepdensity", "--help"], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0
    listed = [line.split()[0] for line in out.stdout.splitlines() if line.startswith("  ")]
    assert listed[: len(cli.COMMANDS)] == list(cli.COMMANDS)
    bad = subprocess.run([sys.executable, "-m", "deepdensity", "trian"], capture_output=True, text=True, cwd=ROOT)
    assert bad.returncode == 2 and bad.stderr.startswith("error: no command 'trian'") and bad.stdout == ""


@pytest.mark.parametrize("command", list(cli.COMMANDS))
def test_each_command_of_the_table_reaches_its_tool(command, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main([command, "--help"])
    assert e.value.code == 0 and capsys.readouterr().out.startswith("usage:")


@pytest.mark.parametrize("module", sorted({m for m, sub in ENTRY_POINTS if not sub} - {"deepdensity.training.dist"}))
def test_every_entry_point_answers_version(module, capsys):
    with pytest.raises(SystemExit) as e:
        importlib.import_module(module).main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.startswith("deepdensity ")


def test_the_command_table_answers_version():
    out = subprocess.run([sys.executable, "-m", "deepdensity", "--version"], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0 and out.stdout.startswith("deepdensity 0.")


def test_train_help_names_the_spelling_used(capsys):
    help_text("deepdensity.training.cli", [], capsys)
    text = subprocess.run(
        [sys.executable, "-m", "deepdensity", "train", "--help"], capture_output=True, text=True, cwd=ROOT
    ).stdout
    assert text.startswith("usage: deepdensity train")


@pytest.mark.parametrize(
    "env, want",
    [
        ({}, ""),
        ({"HOROVOD_SIZE": "1"}, ""),
        ({"HOROVOD_SIZE": "2"}, "horovodrun -np 2 "),
        ({"OMPI_COMM_WORLD_SIZE": "4"}, "horovodrun -np 4 "),
        ({"PMI_SIZE": "8"}, "horovodrun -np 8 "),
        ({"HOROVOD_SIZE": "4", "HOROVOD_CROSS_SIZE": "2"}, "horovodrun -np 4 -H HOST1:SLOTS,HOST2:SLOTS "),
        # ranks horovodrun started under Gloo go on under Gloo: on a build with MPI, MPI is its default
        ({"HOROVOD_SIZE": "2", "HOROVOD_CONTROLLER": "gloo"}, "horovodrun --gloo -np 2 "),
    ],
)
def test_the_resume_command_names_the_launch_it_came_from(env, want, monkeypatch, tmp_path):
    """A run saved by two ranks resumes under horovodrun -np 2: pasted without it, the resume
    would be refused (its N differs)."""
    from deepdensity.training.cli import where_to_continue
    from deepdensity.utils.errors import launcher_prefix

    assert launcher_prefix(env) == want
    for key in ("HOROVOD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "HOROVOD_CROSS_SIZE", "HOROVOD_CONTROLLER"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    (tmp_path / "state.json").write_text('{"epoch": 2}')
    line = where_to_continue(str(tmp_path), ["--mode", "weak", "--out", str(tmp_path)])
    assert line.endswith(f"continue with: {want}python train.py --mode weak --out {tmp_path} --resume")


# Every command's --help in one fresh process, in the command table's order: after each, which
# of TensorFlow's modules are loaded. A command's help must not wait seconds for TensorFlow (nor
# print its banners); the first command that loads it is the one to fix.
HELP_IMPORTS = """
import contextlib, io, json, sys
from deepdensity import cli
loaded = {}
for name in cli.COMMANDS:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            cli.main([name, "--help"])
        except SystemExit:
            pass
    loaded[name] = sorted(m for m in ("tensorflow", "tf_keras", "keras", "horovod.tensorflow") if m in sys.modules)
print(json.dumps(loaded))
"""


def test_no_commands_help_imports_tensorflow():
    import json

    got = subprocess.run([sys.executable, "-c", HELP_IMPORTS], capture_output=True, text=True, timeout=120, cwd=ROOT)
    loaded = json.loads(got.stdout.strip().splitlines()[-1])
    assert list(loaded) == list(cli.COMMANDS)
    assert {name: mods for name, mods in loaded.items() if mods} == {}
