"""One time to target for every cell of the committed study, wherever it is read: Table I and II
(reports/table1.csv, table2.csv), Figs. 2, 4 and 5 and the claims. Each is checked against the paper's
speedup model written out here from the record's clock parameters (section IV: a step's fixed
cost, its cost per sample, the allreduce, the evaluation), times the cell's passes to target
over the passes of an epoch. The tables print one or two decimals: they are compared at half
their last digit; the rest at rel 1e-9, the rounding of a few float operations."""

import json
import math
import statistics
import tempfile
from pathlib import Path
from unittest import mock

import pytest

from deepdensity.scaling import policies, rules
from deepdensity.study.core.cells import MISSED
from deepdensity.study.judge import claims
from deepdensity.study.record import study_of
from deepdensity.study.report.against_n import time_to_target_figure
from deepdensity.study.report.figures import efficiency_figure
from deepdensity.study.report.loss_figures import loss_curves
from tests.support import ROOT

REPORTS = ROOT / "reports"
FIXTURE = ROOT / "tests" / "study" / "data" / "tiny-reports"


@pytest.fixture(scope="module")
def record():
    return json.loads((REPORTS / "study.json").read_text())


def model_epoch(record, mode: str, n: int) -> float:
    """Seconds of one epoch of (mode, N), each worker its own device, from the record's timing:
    steps x (fixed + per sample x per-worker batch + allreduce) + evaluation / N + epoch-end work,
    allreduce = latency + per doubling x log2 N at N > 1; compute parts scaled by compute_scale."""
    t, batch = record["timing"], record["settings"]["batch_size"]
    k = t["compute_scale"]
    p = policies.plan(mode, n, batch)
    steps = rules.steps_per_epoch(record["n_train"], p, record["settings"]["epoch_definition"])
    allreduce = 0.0 if n == 1 else t.get("allreduce_latency_s", 0.0) + t["allreduce_per_doubling_s"] * math.log2(n)
    return (
        steps * (k * t["step_fixed_s"] + k * t["per_sample_s"] * p.per_worker_batch + allreduce)
        + k * t["eval_per_sample_s"] * record["n_val"] / n
        + t.get("epoch_overhead_s", 0.0)
    )


def expected_seconds(record, cell: dict):
    """Passes to target x seconds of a pass (an epoch at N is N passes, per_worker); None: missed."""
    if cell["status"] != "reached_target":
        return None
    per_epoch = cell["n"] if record["settings"]["epoch_definition"] == "per_worker" else 1
    return cell["passes_to_target"] * model_epoch(record, cell["mode"], cell["n"]) / per_epoch


def test_the_report_times_every_cell_by_its_passes_on_the_model(record):
    timed = {(c.mode, c.n, c.seed): c.time_to_target_s for c in claims.cells_of(record)}
    assert len(timed) == len(record["cells"]) > 100
    for cell in record["cells"]:
        want, got = expected_seconds(record, cell), timed[(cell["mode"], cell["n"], cell["seed"])]
        assert (got is None) == (want is None) and (want is None or got == pytest.approx(want, rel=1e-9)), cell


def test_the_claims_time_every_cell_as_the_tables_do(record):
    evidence = claims.evidence_of(record, claims.cells_of(record), MISSED)
    host = evidence.clocks["host"]
    for mode in record["study"]["modes"]:
        for n in study_of(record).workers:
            cells = sorted((c for c in record["cells"] if c["mode"] == mode and c["n"] == n), key=lambda c: c["seed"])
            want = [expected_seconds(record, c) for c in cells]
            got = evidence.seconds(mode, n, host)
            assert [math.inf if w is None else pytest.approx(w, rel=1e-9) for w in want] == got, (mode, n)


def _medians(record, mode: str) -> dict:
    """{N: median time to target} where every seed reached the target."""
    out = {}
    for n in study_of(record).workers:
        times = [expected_seconds(record, c) for c in record["cells"] if c["mode"] == mode and c["n"] == n]
        if times and None not in times:
            out[n] = statistics.median(times)
    return out


def _read_csv(path):
    import csv

    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_tables_one_and_two_print_those_times_and_their_efficiencies(record):
    strong = _medians(record, policies.STRONG)
    for row in _read_csv(REPORTS / "table1.csv"):
        n = int(row["N"])
        median = float(row["time to target (s, modelled), median (range)"].split()[0])
        assert median == pytest.approx(strong[n], abs=0.05 + 1e-9), n
        assert float(row["efficiency % (ours)"]) == pytest.approx(100 * strong[1] / (n * strong[n]), abs=0.005 + 1e-9)
    for row in _read_csv(REPORTS / "table2.csv"):
        n = int(row["N"])
        for mode in (policies.WEAK, policies.WARMUP, policies.LINEAR):
            printed, medians = row[f"{mode} (ours)"], _medians(record, mode)
            if n not in medians:
                assert printed in ("NaN", "not run"), (mode, n)
                continue
            t1 = strong[1] if 1 in strong else medians[1]
            assert float(printed) == pytest.approx(100 * t1 / (n * medians[n]), abs=0.005 + 1e-9), (mode, n)


def _fig2_axes(record, **clock):
    """The data axes of Fig. 2 drawn from `record` on a stand-in pyplot (under `clock` and `base`
    where given, else the cells' own times)."""
    plt, ax = mock.MagicMock(), mock.MagicMock()
    ax.get_ylim.return_value = (10.0, 100.0)  # what the axis would span; only its labels need it
    plt.subplots.return_value = (mock.MagicMock(), (mock.MagicMock(), ax))
    study = study_of(record)
    with tempfile.TemporaryDirectory() as folder:  # save_figure writes a file even for a stand-in figure
        time_to_target_figure(
            Path(folder) / "unused.png", claims.cells_of(record), study.modes, study.workers, plt, **clock
        )
    return ax


def test_fig2_plots_the_times_the_claims_judge(record):
    """Fig. 2 is drawn on the paper's clock, the one the verdicts are given under: every dot it
    draws is a seed's time under that clock as the claims take it, and no missed seed is a dot.
    N = 1 is the same sequential runs in every mode: drawn once."""
    evidence = claims.evidence_of(record, claims.cells_of(record), MISSED)
    study = study_of(record)
    ax = _fig2_axes(record, clock=evidence.clocks["paper"], base=evidence.base)
    drawn = sorted(y for call in ax.scatter.call_args_list for y in call.args[1])
    assert (
        len({tuple(sorted(c["run"] for c in record["cells"] if c["mode"] == m and c["n"] == 1)) for m in study.modes})
        == 1
    ), "every mode's N = 1 is the sequential runs"
    want = sorted(
        t
        for mode in study.modes
        for n in study.workers
        if n > 1 or mode == study.modes[0]
        for t in evidence.seconds(mode, n, evidence.clocks["paper"])
        if math.isfinite(t)
    )
    assert drawn == pytest.approx(want, rel=1e-9) and len(drawn) > 100


def test_fig4_draws_strong_scaling_pass_by_pass_to_table_ones_time_to_target(record):
    """Fig. 4 draws every strong-scaling run pass by pass off its sequential run: pass p at p x a
    pass's seconds at its N, every pass up to its passes to target, so that its last point, and
    its mark on the target line, are its time to target as Table I has it. Fig. 5 (weak scaling,
    losses stored per epoch) marks each run that reached at that time too, and none that missed."""
    cells, study = claims.cells_of(record), study_of(record)
    by_key = {(c["mode"], c["n"], c["seed"]): c for c in record["cells"]}
    strong = loss_curves(
        cells,
        policies.STRONG,
        study.workers,
        record["curves"],
        True,
        record["settings"]["epoch_definition"],
        record["target"],
    )
    ends = 0
    for n, runs in strong:
        per_epoch = n if record["settings"]["epoch_definition"] == "per_worker" else 1
        for r in runs:
            cell = by_key[(r.cell.mode, n, r.cell.seed)]
            want = expected_seconds(record, cell)
            pass_s = model_epoch(record, policies.STRONG, n) / per_epoch
            losses = record["curves"][cell["run"]]["val_loss"]
            assert len(r.points) == math.ceil(cell["passes_to_target"]), (n, cell["seed"])
            assert [x for x, _ in r.points] == pytest.approx(
                [p * pass_s for p in range(1, len(r.points) + 1)], rel=1e-9
            )
            assert [y for _, y in r.points] == pytest.approx(losses[: len(r.points)], rel=1e-12)
            assert r.points[-1][0] == pytest.approx(want, rel=1e-9) and r.end[0] == pytest.approx(want, rel=1e-9)
            assert r.points[-1][1] <= record["target"] < min(y for _, y in r.points[:-1])
            ends += 1
    assert ends == len([c for c in record["cells"] if c["mode"] == policies.STRONG]) > 40
    medians = _medians(record, policies.STRONG)
    for row in _read_csv(REPORTS / "table1.csv"):  # Table I's medians, from the curves' ends
        n = int(row["N"])
        drawn = statistics.median(r.end[0] for m, runs in strong if m == n for r in runs)
        assert drawn == pytest.approx(medians[n], rel=1e-9)
        assert float(row["time to target (s, modelled), median (range)"].split()[0]) == pytest.approx(drawn, abs=0.05)
    weak = loss_curves(
        cells,
        policies.WEAK,
        study.workers,
        record["curves"],
        False,
        record["settings"]["epoch_definition"],
        record["target"],
    )
    for n, runs in weak:
        for r in runs:
            want = expected_seconds(record, by_key[(policies.WEAK, n, r.cell.seed)])
            assert (r.end is None) == (want is None), (n, r.cell.seed)
            assert r.end is None or r.end == (pytest.approx(want, rel=1e-9), record["target"])
            assert len(r.points) == r.cell.epochs


def test_the_efficiency_figure_draws_one_clock_a_panel(record, tmp_path):
    """fig_efficiency's left panel is Table I's efficiencies (this host's clock), its right one
    the same on the paper's clock, from the times the claims judge under it; each panel names
    its clock."""
    cells = claims.cells_of(record)
    evidence = claims.evidence_of(record, cells, MISSED)
    paper = evidence.clocks["paper"]
    plt = mock.MagicMock()
    axes = [[mock.MagicMock(), mock.MagicMock()], [mock.MagicMock(), mock.MagicMock()]]
    plt.subplots.return_value = (mock.MagicMock(), axes)
    study = study_of(record)
    efficiency_figure(tmp_path / "unused.png", cells, study.modes, study.workers, plt, clock=paper, base=evidence.base)

    def strong(ax) -> list:
        return [
            y
            for call in ax.plot.call_args_list
            if call.kwargs.get("label") == f"{policies.STRONG} (ours)"
            for y in call.args[1]
        ]

    table1 = [float(row["efficiency % (ours)"]) for row in _read_csv(REPORTS / "table1.csv")]
    assert strong(axes[1][0]) == pytest.approx(table1, abs=0.005 + 1e-9)
    times = {n: statistics.median(evidence.seconds(policies.STRONG, n, paper)) for n in study.workers}
    assert strong(axes[1][1]) == pytest.approx([100 * times[1] / (n * times[n]) for n in study.workers], rel=1e-9)
    titles = [axes[0][i].set_title.call_args.args[0] for i in (0, 1)]
    assert "this host's clock" in titles[0] and "the paper's clock" in titles[1]
