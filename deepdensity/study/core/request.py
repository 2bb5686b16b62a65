"""One run the study asks for, resolved once: its name, policy and N, and its settings.

The study names what a run sets beyond its runs folder's train.yaml as Python values (an lr as a
float, a cap as an int), and `resolve` reads them once into the Config the run trains with,
checked by the same schema as train.py's --set. The ledger's key and stopping rules, the check
that a finished run in the folder still matches, and train.py's command line all read the one
RunRequest (study/run/runner.py).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Mapping

from deepdensity.config import Config, ConfigError, apply
from deepdensity.scaling.rules import StoppingRules


@dataclass(frozen=True)
class RunRequest:
    name: str
    mode: str
    n: int
    config: Config  # train.yaml with this run's settings
    settings: tuple  # ((field, value), ...): what the study set beyond train.yaml, in its order

    def set_words(self) -> list:
        """The run's settings as train.py's `--set` words: a float (numpy's too) by the repr of
        the Python float, which reads back as the same float; anything else as written."""
        return [
            w for k, v in self.settings for w in ("--set", f"{k}={float(v)!r}" if isinstance(v, float) else f"{k}={v}")
        ]


def cells_stopping(cfg: Config, target: float, max_epochs: int, collapse_loss: float) -> StoppingRules:
    """The stopping rules every cell's runs apply: the settings' stall and collapse rules at the
    study's target, cap and collapse level (the collapse rule off where its patience is)."""
    return dataclasses.replace(
        StoppingRules.of(cfg),
        target_loss=target,
        max_epochs=max_epochs,
        collapse_loss=collapse_loss if cfg.collapse_patience else 0.0,
    )


def resolve(base: Config, name: str, mode: str, n: int, settings: Mapping) -> RunRequest:
    """The run `name` (policy `mode` at N = `n`) with `settings` over `base` (the runs folder's
    train.yaml); a setting the schema refuses is a ConfigError naming the run."""
    try:
        config = apply(base, dict(settings), f"the study's run {name}")
    except ConfigError as e:  # the schema names the run; Config's own checks do not
        raise ConfigError(str(e) if name in str(e) else f"the study's run {name}: {e}") from None
    return RunRequest(name, mode, n, config, tuple(settings.items()))
