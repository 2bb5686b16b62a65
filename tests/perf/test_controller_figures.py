"""make bench's figures by controller (perf/controller_figures.py): what it launches under each
controller and how it pairs the rounds (no process is started here)."""

import json
import subprocess

import pytest

from deepdensity.launch import controllers
from deepdensity.perf import controller_figures

# samples/s each launch answers: one process, -np 2 under MPI, under Gloo, per round
RATES = {"one": [100.0, 200.0, 100.0], "--mpi": [96.0, 180.0, 99.0], "--gloo": [80.0, 170.0, 81.0]}
WAITS = [[(0.0, 0.004), (1.0, 1.003)], [(0.001, 0.004), (1.0, 1.003)]]  # wait 1 ms then 3 ms; 0 then 3 ms


@pytest.fixture
def launched(monkeypatch):
    ran = []
    answers = {who: iter(rates) for who, rates in RATES.items()}

    def run_child(args, env=None, timeout=None):
        ran.append((args, env or {}))
        if "rank-waits" in args:
            # mpirun's tag again after its 4 KB read, inside the line
            text = json.dumps(WAITS)
            reply = "[1,0]<stdout>:RANK_WAITS " + text[:20] + "[1,0]<stdout>:" + text[20:]
            return subprocess.CompletedProcess(args, 0, stdout=reply, stderr="")
        who = next((flag for flag in ("--mpi", "--gloo") if flag in args), "one")
        return subprocess.CompletedProcess(args, 0, stdout=f"SAMPLES_PER_S {next(answers[who])}\n", stderr="")

    monkeypatch.setattr(controller_figures, "run_child", run_child)
    monkeypatch.setattr(controller_figures, "horovodrun_path", lambda: "/venv/bin/horovodrun")
    monkeypatch.setattr(controllers, "built", lambda horovodrun: frozenset({"mpi", "gloo"}))
    return ran


def test_each_controller_is_paired_round_by_round_with_one_process(launched):
    fig = controller_figures.controller_figures("c.yaml", pairs=3)
    assert fig["controllers_built"] == ["mpi", "gloo"] and fig["rounds"] == 3
    assert fig["one_process_samples_s"] == 100.0
    # the ratio round by round, not of the medians: 0.96, 0.90, 0.99 under MPI
    assert fig["mpi"]["ratios"] == pytest.approx([0.96, 0.90, 0.99])
    assert fig["mpi"]["ratio_median"] == pytest.approx(0.96) and fig["mpi"]["ratio_min"] == pytest.approx(0.90)
    assert fig["gloo"]["ratio_median"] == pytest.approx(0.81)
    assert fig["mpi"]["rank_waits"]["wait_for_last_rank_ms_median"] == pytest.approx(0.5)
    assert fig["mpi"]["rank_waits"]["after_all_called_ms_median"] == pytest.approx(3.0)


def test_the_order_turns_round_and_mpi_ranks_yield(launched):
    controller_figures.controller_figures("c.yaml", pairs=2)
    order = [next((f for f in ("--mpi", "--gloo") if f in args), "one") for args, _ in launched if "throughput" in args]
    assert order == ["one", "--mpi", "--gloo", "--gloo", "--mpi", "one"]
    for args, env in launched:
        if "-np" in args:
            assert args[:4] in (["/venv/bin/horovodrun", flag, "-np", "2"] for flag in ("--mpi", "--gloo"))
            assert env == {"OMPI_MCA_mpi_yield_when_idle": "1"}
        else:
            assert "--batch" in args and args[args.index("--batch") + 1] == "64"


def test_a_gloo_only_horovod_is_benched_under_gloo_alone(launched, monkeypatch):
    monkeypatch.setattr(controllers, "built", lambda horovodrun: frozenset({"gloo"}))
    fig = controller_figures.controller_figures("c.yaml", pairs=1)
    assert fig["controllers_built"] == ["gloo"] and "mpi" not in fig
    assert not any("--mpi" in args for args, _ in launched)
