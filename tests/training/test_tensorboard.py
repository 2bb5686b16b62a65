"""`tensorboard --logdir runs` from the installed environment, for real: the server starts on
a free port, serves a trained run as one TensorBoard run, its scalars and slice images through
its HTTP API at the epoch numbers the run printed, and the tags the Time Series page orders
(time_series.py) with the losses first; then it stops."""

import json
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from deepdensity.training.runs import read_metrics
from tests.training.time_series import card_order

STARTUP_S = 90  # TensorBoard imports TensorFlow before it listens: tens of seconds on 2 cores


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(port: int, path: str, **query):
    url = f"http://127.0.0.1:{port}{path}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
    with urllib.request.urlopen(url, timeout=30) as r:
        return r.read()


def wait_for_runs(port: int, proc: subprocess.Popen) -> list:
    """The runs TensorBoard lists, once it has loaded at least one (bounded by STARTUP_S)."""
    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"tensorboard exited {proc.returncode}:\n{proc.stderr.read()[-2000:]}")
        try:
            runs = json.loads(get(port, "/data/runs"))
            if runs:
                return runs
        except OSError:
            pass
        time.sleep(1)
    raise AssertionError(f"tensorboard listed no run within {STARTUP_S} s")


@pytest.mark.slow
def test_tensorboard_serves_a_runs_scalars_and_images(smoke_run):
    exe = Path(sys.executable).with_name("tensorboard")
    port = free_port()
    proc = subprocess.Popen(
        [
            str(exe),
            "--logdir",
            str(smoke_run.parent),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--reload_interval",
            "1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        runs = wait_for_runs(port, proc)
        assert runs == ["run/tb"], "one TensorBoard run per training run"

        # the loss TensorBoard serves is the one metrics.jsonl recorded for the same epoch
        series = json.loads(get(port, "/data/plugin/scalars/scalars", run="run/tb", tag="loss/validation"))
        rows = read_metrics(smoke_run)
        assert [step for _, step, _ in series] == [m["epoch"] for m in rows] == [1]
        # float32 in the event file against the float64 JSON of the same number
        assert [v for _, _, v in series] == pytest.approx([m["val_loss"] for m in rows], rel=1e-6)

        tags = json.loads(get(port, "/data/plugin/images/tags"))["run/tb"]
        tag = next(iter(tags))
        images = json.loads(get(port, "/data/plugin/images/images", run="run/tb", tag=tag, sample=0))
        assert [im["step"] for im in images] == [1]
        png = get(port, "/data/plugin/images/individualImage?" + images[0]["query"])
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 100

        # what the Time Series page (TensorBoard's first) gets to lay out: the losses first
        index = json.loads(get(port, "/data/plugin/timeseries/tags"))
        scalars = set(index["scalars"]["runTagInfo"]["run/tb"])
        order = card_order(scalars | set(index["images"]["tagRunSampledInfo"]))
        assert order[:2] == ["loss/train", "loss/validation"] and set(order[: len(scalars)]) == scalars, order
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert proc.returncode is not None
