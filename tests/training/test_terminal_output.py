"""What a run shows on a terminal, as a Keras user reads it (issue 47): its own lines and a
progress bar, no library noise between or inside them, and Ctrl-C's '^C' on a line of its own,
not inside the bar. The screen is the one a terminal would show (tests/training/terminal.py);
the ranks under horovodrun are checked by test_ctrl_c.py on every interrupt."""

import os
import re
import sys

import pytest

from deepdensity.training.console import is_the_program
from deepdensity.utils.native_logs import native_log_pattern
from tests.support import ROOT, SMOKE
from tests.training.terminal import Terminal, screen

# what TensorFlow, absl, XLA, oneDNN and Keras print unasked
NOISE = re.compile(
    r"absl|XLA|oneDNN|cpu_feature_guard|SetPriority|is slow compared|WARNING:tensorflow|"
    r"^[IWEF]\d{4} |^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d",
    re.M,
)


def test_the_screen_is_what_a_terminal_shows():
    raw = "a\nbar  10%|#\r\x1b[Kbar  20%|##^C\r\x1b[K^C\ninterrupted: x\n"
    assert screen(raw) == ["a", "^C", "interrupted: x", ""]
    assert screen("abcdef", columns=4) == ["abcd", "ef"]
    assert screen("one\ntwo\x1b[A\rON") == ["ONe", "two"]


@pytest.mark.parametrize(
    "level, kept, dropped",
    [
        (
            "3",
            ["error: y", "[0]<stderr>:interrupted: at epoch 2", "Traceback (most recent call last):"],
            [
                "I0000 00:00:1795695989.125384   24472 device_compiler.h:186] Compiled cluster using XLA!",
                "E0000 00:00:1.5 7 x.cc:3] bad",
                "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
            ],
        ),
        (
            "1",
            ["W0000 00:00:1.5 7 x.cc:3] careful", "E0000 00:00:1.5 7 x.cc:3] bad"],
            ["I0000 00:00:1.5 7 x.cc:3] hello"],
        ),
    ],
)
def test_absl_lines_are_dropped_at_the_levels_tf_cpp_min_log_level_silences(level, kept, dropped):
    pattern = re.compile(native_log_pattern(level))
    assert [line for line in kept if pattern.search(line)] == []
    assert [line for line in dropped if not pattern.search(line)] == []
    assert native_log_pattern("0") is None and native_log_pattern(None) is None and native_log_pattern("x") is None


def test_only_a_training_command_arranges_its_process_stderr():
    assert is_the_program("train.py") and is_the_program("/venv/bin/deepdensity")
    assert is_the_program("/repo/deepdensity/__main__.py")
    assert not is_the_program("/venv/bin/pytest") and not is_the_program("/venv/lib/pytest/__main__.py")


@pytest.mark.slow
def test_a_run_on_a_terminal_shows_its_lines_and_ctrl_c_on_a_line_of_its_own(tmp_path, smoke_data):
    out = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    term = Terminal(
        [
            sys.executable,
            "train.py",
            "--mode",
            "strong",
            "--config",
            SMOKE,
            "--set",
            f"data_path={smoke_data}",
            "--set",
            "max_epochs=40",
            "--out",
            str(out),
        ],
        ROOT,
        {**env, "PYTHONPATH": str(ROOT)},
        columns=100,
    )
    # the first epoch's step compiles (XLA logs then), and the bar of the third is on the screen
    assert term.wait_for(lambda t: "strong N=1 epoch 3:" in t.raw, 300), term.raw[-3000:]
    term.ctrl_c()
    assert term.finish(120) == 130, term.raw[-3000:]
    lines = [line for line in term.screen() if line]
    said = "\n".join(lines)
    assert not NOISE.search(term.raw), said
    assert "%|" in term.raw, "the progress bar was on the terminal"
    assert not [line for line in lines if "%|" in line], f"a bar left on the screen:\n{said}"
    caret = lines.index("^C")
    assert lines[caret + 1].startswith("interrupted: at epoch "), said
    assert [line for line in lines if "^C" in line] == ["^C"], said
    assert all(re.match(r"epoch +\d+  loss ", line) for line in lines[caret - 2 : caret]), said
