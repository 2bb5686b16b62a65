"""How messages show what the user gave: a path as given (a newline seen as one, not as a line
break or a space), an `error:` line that stays one line, a suggested command that pastes back
the very words."""

import shutil
import subprocess

import pytest

from deepdensity.utils.errors import UserError, command, one_line, shell_word, shown

# words that do not print as themselves (control and invisible characters, spaces at an end)
ODD = ["data/a\nb.h5", "tab\there", " lead", "trail ", "back\\slash\n", "zero\u200bwidth", "bell\x07"]
# and words a shell must quote though they print as they are
QUOTED = ["it's", "plain é.h5", "a b", "$HOME"]


def test_a_path_that_prints_as_itself_is_shown_as_it_is():
    assert shown("data/smoke.h5") == "data/smoke.h5" and shown("runs/é 1") == "runs/é 1"


@pytest.mark.parametrize("text", ODD)
def test_a_path_that_would_not_print_as_itself_is_shown_by_its_repr(text):
    said = shown(text)
    assert said == repr(text) and said.isprintable() and "\n" not in said


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash for $'...'")
@pytest.mark.parametrize("word", ODD + QUOTED)
def test_a_suggested_commands_words_paste_back_as_given(word):
    out = subprocess.run(
        ["bash", "-c", "printf %s " + shell_word(word)], capture_output=True, text=True, check=True
    ).stdout
    assert out == word
    assert shell_word(word).isprintable(), "the command stays on one line"


def test_an_error_line_is_one_line_whatever_it_quotes(capsys):
    @command
    def main(argv=None):
        raise UserError("data file data/a\nb.h5 is damaged\r")

    assert main([]) == 2
    assert capsys.readouterr().err == "error: data file data/a\\nb.h5 is damaged\\r\n"
    assert one_line("nothing odd here") == "nothing odd here"
