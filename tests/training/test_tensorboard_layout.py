"""TensorBoard as a person meets it, read from a real run's event files the way TensorBoard
reads them (its EventMultiplexer over the logdir): one TensorBoard run per training run, its
steps the epoch numbers the run printed (images' the same), the values metrics.jsonl holds,
the losses the first cards of the Time Series page, and a resumed run going on in the same
TensorBoard run from the epoch it resumed at."""

import json
import re
import shutil
import sys

import pytest

from tests.support import ROOT, SMOKE, run
from tests.training.time_series import card_groups, card_order, sort_tags

# the layout the docs promise (docs/training.md), written out here rather than read from watch.py
SCALARS = {"loss/train": "loss", "loss/validation": "val_loss", "lr": "lr"}  # tag: metrics.jsonl key
IMAGE = "slices/validation cube | rendered density"
EPOCH_LINE = re.compile(r"^epoch\s+(\d+)\s+loss ", re.M)


def train(out, *extra, data):
    """The epoch numbers the run printed on its epoch lines."""
    proc = run(
        [
            sys.executable,
            str(ROOT / "train.py"),
            "--mode",
            "warmup",
            "--emulate-workers",
            "2",
            "--config",
            SMOKE,
            "--set",
            f"data_path={data}",
            "--set",
            "warmup_epochs=2",
            "--set",
            "tensorboard_images_every=2",
            "--out",
            str(out),
            *extra,
        ]
    )
    return [int(n) for n in EPOCH_LINE.findall(proc.stdout)]


def tensorboard_runs(logdir) -> dict:
    """{run name: {"scalars": {tag: [(step, value)]}, "images": {tag: [(step, (width, height))]}}} as TensorBoard
    reads `logdir`: a run per directory holding event files, named by its path under logdir."""
    import tensorflow as tf
    from tensorboard.backend.event_processing.plugin_event_multiplexer import EventMultiplexer

    mux = EventMultiplexer(tensor_size_guidance={"scalars": 0, "images": 0})
    mux.AddRunsFromDirectory(str(logdir))
    mux.Reload()
    found = {}
    for name in mux.Runs():
        acc = mux.GetAccumulator(name)
        kinds = {"scalars": {}, "images": {}}
        for tag in acc.Tags()["tensors"]:
            plugin = acc.SummaryMetadata(tag).plugin_data.plugin_name
            events = acc.Tensors(tag)
            if plugin == "scalars":
                kinds["scalars"][tag] = [(e.step, float(tf.make_ndarray(e.tensor_proto))) for e in events]
            elif plugin == "images":
                kinds["images"][tag] = [
                    (e.step, tuple(int(v) for v in tf.make_ndarray(e.tensor_proto)[:2])) for e in events
                ]
        found[name] = kinds
    return found


def metrics(out) -> list:
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def watched(tmp_path_factory, smoke_data):
    """(logdir, the run folder in it, the epoch numbers it printed): warmup at N=2 for the smoke
    config's 3 epochs (its lr changes from epoch to epoch), images every 2 epochs."""
    logdir = tmp_path_factory.mktemp("logdir")
    printed = train(logdir / "run", data=smoke_data)
    return logdir, logdir / "run", printed


@pytest.mark.slow
def test_one_tensorboard_run_per_training_run_its_steps_the_printed_epochs(watched):
    logdir, out, printed = watched
    assert printed == [1, 2, 3]
    runs = tensorboard_runs(logdir)
    assert list(runs) == ["run/tb"], "one TensorBoard run, not train/validation/images"
    scalars, images = runs["run/tb"]["scalars"], runs["run/tb"]["images"]
    assert set(scalars) == set(SCALARS) and set(images) == {IMAGE}
    rows = metrics(out)
    assert [r["epoch"] for r in rows] == printed
    for tag, key in SCALARS.items():
        assert [step for step, _ in scalars[tag]] == printed, tag
        # float32 in the event file against the float64 JSON of the same number
        assert [v for _, v in scalars[tag]] == pytest.approx([r[key] for r in rows], rel=1e-6), tag
    assert scalars["lr"][0][1] < scalars["lr"][-1][1], "warmup's lr, as the optimizer held it at each epoch's end"
    steps = [step for step, _ in images[IMAGE]]
    assert steps == [printed[0], printed[2]], "the first epoch, then every 2, on the epoch lines' numbers"
    # four cubes, a row each: the 16^3 cube's central slice | a 1-pixel rule | its rendering, 8x
    assert {size for _, size in images[IMAGE]} == {((16 + 1 + 16) * 8, 4 * (16 + 1) * 8)}


@pytest.mark.slow
def test_the_time_series_page_opens_on_the_losses_and_ends_with_the_images(watched):
    logdir, _, _ = watched
    run_tags = tensorboard_runs(logdir)["run/tb"]
    scalar_tags, image_tags = set(run_tags["scalars"]), set(run_tags["images"])
    order = card_order(scalar_tags | image_tags)
    assert order[:2] == ["loss/train", "loss/validation"], order
    assert set(order[: len(scalar_tags)]) == scalar_tags, f"every scalar card before any image card: {order}"
    assert card_groups(order)[0] == ("loss", ["loss/train", "loss/validation"])


@pytest.mark.slow
def test_a_resumed_run_goes_on_in_the_same_tensorboard_run_from_its_epoch(watched, tmp_path, smoke_data):
    _, out, first = watched
    logdir = tmp_path / "logdir"
    shutil.copytree(out, logdir / "run")
    resumed = train(logdir / "run", "--resume", "--set", "max_epochs=5", data=smoke_data)
    assert resumed == [4, 5]
    runs = tensorboard_runs(logdir)
    assert list(runs) == ["run/tb"]
    steps = [step for step, _ in runs["run/tb"]["scalars"]["loss/validation"]]
    assert steps == first + resumed, "no epoch twice, none missing, no restart at 1"
    assert [r["epoch"] for r in metrics(logdir / "run")] == steps
    assert [step for step, _ in runs["run/tb"]["images"][IMAGE]] == [1, 3, 5]


# ---- the ordering rule the page test relies on: TensorBoard's own cases (utils_test.ts) ----
@pytest.mark.parametrize(
    "tags, expected",
    [
        (["a", "B"], ["B", "a"]),
        (["a03", "a1"], ["a1", "a03"]),
        (["a/b/03", "a/b/1"], ["a/b/1", "a/b/03"]),
        (["a0.1", "a0.01"], ["a0.01", "a0.1"]),
        (["a1e+5", "a9e-6"], ["a9e-6", "a1e+5"]),
        (["a+/a", "a/a", "ab/c", "ab/a"], ["a/a", "a+/a", "ab/a", "ab/c"]),
        (["a+0a", "a0a", "ab0a"], ["a0a", "a+0a", "ab0a"]),
        (["a", "//", "/", ""], ["", "/", "//", "a"]),
        (["0..2", "0..03"], ["0..2", "0..03"]),
    ],
)
def test_the_tag_order_is_tensorboards(tags, expected):
    assert sort_tags(tags) == expected


def test_the_card_groups_are_tensorboards():
    assert card_groups(["b", "a/b/c/d", "a/b/c", "c/c/d"]) == [
        ("a", ["a/b/c", "a/b/c/d"]),
        ("b", ["b"]),
        ("c", ["c/c/d"]),
    ]


def test_every_tag_a_run_can_write_sorts_the_losses_first_and_the_images_last():
    # a policy's facts (adaptive's, local's) too, which the warmup run above does not write
    from deepdensity.training import watch

    order = card_order(set(watch.SCALARS.values()) | {watch.IMAGE_TAG})
    assert order[:2] == ["loss/train", "loss/validation"] and order[-1] == watch.IMAGE_TAG, order
    assert watch.IMAGE_TAG == IMAGE


def test_the_order_check_fails_on_the_layout_keras_gave():
    # Keras's callback and the old image tag: the page opened on the images (issue 47)
    order = card_order(
        {"epoch_loss", "epoch_lr", "evaluation_loss_vs_iterations", "central slices: cube | rendered density"}
    )
    assert order[0] == "central slices: cube | rendered density"
