"""A run the study asks for, resolved once (study/core/request.py): its Config is the one train.py
builds from the command line the runner writes for it, so that the ledger's key, read from the
request, is the key of the run that trains."""

import numpy as np
import pytest

from deepdensity.config import Config, ConfigError, load
from deepdensity.scaling.rules import StoppingRules
from deepdensity.study.core.request import cells_stopping, resolve


def test_the_command_line_gives_train_py_the_same_config(tmp_path):
    yaml = tmp_path / "train.yaml"
    yaml.write_text("n_components: 8\nmax_epochs: 12\nstall_patience: 5\n")
    # floats that a short decimal would not give back, a numpy float, ints, text
    settings = {
        "base_lr": 0.1 + 0.2,
        "target_loss": np.float64(1 / 3),
        "seed": 7,
        "max_epochs": 40,
        "stall_patience": 0,
        "epoch_definition": "global",
    }
    asked = resolve(load(str(yaml)), "weak-n2-s7", "weak", 2, settings)
    words = asked.set_words()
    assert words[::2] == ["--set"] * len(settings)
    assert words[3] == f"target_loss={1 / 3!r}", "the Python float's repr, not numpy's"
    # train.py's own reading of the words (config.load parses --set as YAML scalars)
    assert load(str(yaml), words[1::2]) == asked.config
    assert (asked.config.base_lr, asked.config.max_epochs, asked.config.n_components) == (0.1 + 0.2, 40, 8)


def test_a_setting_the_schema_refuses_names_the_run(tmp_path):
    with pytest.raises(ConfigError, match="weak-n2-s0"):
        resolve(Config(), "weak-n2-s0", "weak", 2, {"max_epochs": -1})
    with pytest.raises(ConfigError, match="weak-n2-s0"):
        resolve(Config(), "weak-n2-s0", "weak", 2, {"no_such_setting": 1})


def test_the_cells_rules_are_the_settings_at_the_studys_target_cap_and_collapse_level():
    cfg = Config(stall_patience=6, collapse_patience=3)
    assert cells_stopping(cfg, 0.002, 64, 0.0049) == StoppingRules(
        target_loss=0.002,
        max_epochs=64,
        stall_patience=6,
        stall_near=cfg.stall_near,
        stall_near_patience=cfg.stall_near_patience,
        collapse_loss=0.0049,
        collapse_patience=3,
    )
    # the collapse rule off, its level is 0 whatever the data's
    assert cells_stopping(Config(collapse_patience=0), 0.002, 64, 0.0049).collapse_loss == 0.0
