"""The default study's figures as its reports draw them from the record: those the record has
data for, drawn into the reports folder (by figures.py, loss_figures.py and against_n.py), the
stale ones removed, and Fig. 2's caption."""

from __future__ import annotations

import textwrap
from pathlib import Path

from deepdensity.scaling import policies
from deepdensity.study.core.cells import failure_groups
from deepdensity.study.core.preset import Study
from deepdensity.study.judge.claims import clock_set, record_runner
from deepdensity.study.record import config_of, time_base
from deepdensity.study.report.against_n import against_n_caption, time_to_target_figure
from deepdensity.study.report.figures import collapse_figure, efficiency_figure, figure1, sweep_figure
from deepdensity.study.report.loss_figures import loss_against_time_figure, warmup_figure
from deepdensity.study.report.render import cells_at
from deepdensity.utils.plots import pyplot


def figure_names() -> tuple:
    """Every figure the default study's reports may hold: the renderer owns these files, and
    removes one it did not draw this time (an earlier render's, now stale)."""
    paper = tuple(sorted({policies.get(m).paper_figure for m in policies.names()} - {""}))
    return ("fig1.png", "fig2.png", "fig3.png", "fig_efficiency.png", "fig_collapse.png", "fig6.png") + paper


def draw_figures(out: Path, record: dict, study: Study, cells: list) -> set:
    """Draws the figures the record has data for; removes those of figure_names it did not
    draw. Returns the names drawn."""
    plt, drawn = pyplot(), {"fig2.png", "fig_efficiency.png", "fig_collapse.png"}
    # fig2 on the clock the verdicts are given under (the paper's), named on its axis; the
    # efficiencies on the tables' clock and on that one, a panel each
    paper = _verdicts_clock(record, cells)
    time_to_target_figure(out / "fig2.png", cells, study.modes, study.workers, plt, **paper)
    efficiency_figure(out / "fig_efficiency.png", cells, study.modes, study.workers, plt, **paper)
    warmup8 = sorted(cells_at(cells, policies.WARMUP, 8), key=lambda c: c.seed)
    if warmup8:
        warmup_figure(
            out / "fig3.png",
            {c.run: record["curves"][c.run] for c in warmup8},
            record["target"],
            plt,
            missed={c.run: c.status for c in warmup8 if not c.reached},
        )
        drawn.add("fig3.png")
    groups = failure_groups(cells, record["seq_2eta"], record["settings"]["batch_size"])
    collapse_figure(out / "fig_collapse.png", groups, plt)
    for mode in [m for m in study.modes if policies.get(m).paper_figure]:
        policy = policies.get(mode)
        loss_against_time_figure(
            out / policy.paper_figure,
            cells,
            mode,
            study.workers,
            record["curves"],
            record["target"],
            derived=policy.follows_sequential_path and not record["runner"],
            definition=config_of(record).epoch_definition,
            plt=plt,
        )
        drawn.add(policy.paper_figure)
    if record.get("fig1"):  # None: no weights of the first sequential run were at hand
        figure1(out / "fig1.png", record["fig1"], plt)
        drawn.add("fig1.png")
    if record["lr_search"]:
        sweep_figure(out / "fig6.png", record["lr_search"], plt)
        drawn.add("fig6.png")
    for name in set(figure_names()) - drawn:
        (out / name).unlink(missing_ok=True)
    return drawn


def _verdicts_clock(record: dict, cells: list) -> dict:
    """The clock and time base (`clock`, `base`) Fig. 2 and fig_efficiency's second panel draw
    under: the paper's, the verdicts', where times are modelled; none where they are real runs'
    own or the record has no clock."""
    if "timing" not in record or record_runner(cells):
        return {}
    return {"clock": clock_set(record)["paper"], "base": time_base(record)}


FIG2_CAPTION = (
    "Fig. 2: time to target against N on the clock its axis names (where times are modelled, the paper's: "
    "the verdicts' clock; passes x its seconds a pass), every seed a dot and the median over seeds a bar "
    "and line where every seed reached the target; the seeds that missed it are crosses in the panel "
    "above, never drawn at a time."
)


def fig2_caption(cells: list, study: Study) -> str:
    """Fig. 2's caption: what it draws, and which runs its N = 1 is (against_n_caption)."""
    return textwrap.fill(FIG2_CAPTION + against_n_caption(cells, study.modes), 110)
