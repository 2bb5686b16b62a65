"""The command table: `deepdensity <command>` reaches every tool, every entry point answers
--help, and every flag with a default shows it."""
import importlib
import subprocess
import sys

import pytest

from deepdensity import cli
from tests.support import ROOT

ENTRY_POINTS = [("deepdensity.training.cli", []), ("deepdensity.data.cli", []), ("deepdensity.data.cli", ["synth"]),
                ("deepdensity.data.cli", ["prepare"]), ("deepdensity.data.cli", ["synth-scans"]),
                ("deepdensity.study.repro", []), ("deepdensity.perf.bench", []), ("deepdensity.tools.encode", []),
                ("deepdensity.tools.generate", []), ("deepdensity.tools.filter", []),
                ("deepdensity.tools.plot", []), ("deepdensity.study.report", []), ("deepdensity.training.dist", [])]


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


@pytest.mark.parametrize("module, sub, flags", [
    ("deepdensity.tools.generate", [], ["--scheme", "--seed", "--batch", "--noise", "--t-min"]),
    ("deepdensity.tools.encode", [], ["--split", "--batch"]),
    ("deepdensity.perf.bench", [], ["--config", "--out", "--repeats", "--pairs"]),
    ("deepdensity.training.cli", [], ["--emulate-workers"]),
    ("deepdensity.data.cli", ["synth"], ["--n", "--val", "--seed", "--cube", "--spacing"]),
    ("deepdensity.data.cli", ["synth-scans"], ["--n", "--seed", "--format"]),
])
def test_flags_with_a_default_show_it(module, sub, flags, capsys):
    entries, current = {}, None
    for line in help_text(module, sub, capsys).splitlines():
        if line.startswith("  -"):                   # a flag's entry starts; wrapped lines are indented more
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
    assert listed[:len(cli.COMMANDS)] == list(cli.COMMANDS)
    bad = subprocess.run([sys.executable, "-m", "deepdensity", "trian"], capture_output=True, text=True, cwd=ROOT)
    assert bad.returncode == 2 and bad.stderr.startswith("error: no command 'trian'") and bad.stdout == ""


@pytest.mark.parametrize("command", list(cli.COMMANDS))
def test_each_command_of_the_table_reaches_its_tool(command, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main([command, "--help"])
    assert e.value.code == 0 and capsys.readouterr().out.startswith("usage:")
