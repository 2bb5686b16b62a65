"""A fifth policy in a few lines trains end to end: the trainer asks the policy, never its name."""

import json
import sys

import pytest

from tests.support import SMOKE, run

ETA = 0.00105

TOY = """
import math, sys
from deepdensity.config import load
from deepdensity.scaling import policies
from deepdensity.training.trainer import train


@policies.register
class SquareRootLR(policies.Weak):
    name, summary = "sqrt", "as weak, lr sqrt(N) * eta"

    def peak_lr(self, base_lr, workers):
        return base_lr * math.sqrt(workers)


config, data, out = sys.argv[1:]
train(load(config, [f"data_path={data}", "max_epochs=1"]), "sqrt", out, emulate_workers=4, verbose=False)
"""


@pytest.mark.slow
def test_a_toy_policy_trains_one_epoch_with_its_own_lr(tmp_path, smoke_data):
    script, out = tmp_path / "toy.py", tmp_path / "run"
    script.write_text(TOY)
    run([sys.executable, str(script), SMOKE, str(smoke_data), str(out)])
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["mode"] == "sqrt" and cfg["workers"] == 4
    assert cfg["global_batch"] == 4 * 32, "weak's batches: B per worker"
    assert cfg["lr"] == pytest.approx(2 * ETA, rel=1e-12), "sqrt(4) x eta, the toy's own rule"
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in rows] == [1]
    assert rows[0]["lr"] == pytest.approx(2 * ETA, rel=1e-6), "the optimizer held it (float32)"
    assert json.loads((out / "result.json").read_text())["mode"] == "sqrt"
