"""The probes' two halves meet: what probes.py launches, rank_probes.py's entry point parses as
meant, and what rank 0 prints is read back (no process is started here)."""

import subprocess

import pytest

from deepdensity.perf import probes, rank_probes


class Launches(list):
    """The commands a probe ran, each {"args", "env"}; every one answered with `reply` on stdout
    and exit status `code`."""

    reply, code = "", 0


@pytest.fixture
def launches(monkeypatch):
    ran = Launches()

    def run_child(args, env=None, timeout=None):
        ran.append({"args": args, "env": env or {}})
        return subprocess.CompletedProcess(args, ran.code, stdout=ran.reply, stderr="it broke")

    monkeypatch.setattr(probes, "run_child", run_child)
    monkeypatch.setattr(probes, "horovodrun_path", lambda: "/bin/horovodrun")
    return ran


def probe_args(args: list):
    """rank_probes' reading of a launched command (what follows `-m deepdensity.perf.rank_probes`)."""
    at = args.index("-m")
    assert args[at + 1] == "deepdensity.perf.rank_probes"
    return rank_probes._parser().parse_args(args[at + 2 :])


def test_a_step_probe_on_n_ranks_runs_the_step_entry_point_under_horovodrun(launches):
    # rank 0's lines come prefixed by horovodrun; another rank's line is not read
    launches.reply = "[1]<stdout>:noise\n[0]<stdout>:STEP_SECONDS 8 0.025000\n[0]<stdout>:STEP_SECONDS 16 0.040000\n"
    seconds, evaluation = probes.probe_step_seconds("s.yaml", 4, [8, 16], steps=30, allreduce=True, on_data=True)
    assert seconds == {8: 0.025, 16: 0.040} and evaluation is None
    args = launches[0]["args"]
    assert args[:3] == ["/bin/horovodrun", "-np", "4"]
    got = probe_args(args)
    assert (got.probe, got.config, got.batches, got.steps, got.allreduce, got.on_data) == (
        "step",
        "s.yaml",
        "8,16",
        30,
        True,
        True,
    )


def test_a_step_probe_on_one_process_needs_no_launcher_and_reads_the_evaluation(launches):
    launches.reply = "STEP_SECONDS 1 0.003000\nEVAL_SECONDS_PER_SAMPLE 0.00037000\n"
    assert probes.probe_step_seconds("s.yaml", 1, [1]) == ({1: 0.003}, 0.00037)
    args = launches[0]["args"]
    assert "/bin/horovodrun" not in args
    got = probe_args(args)
    assert (got.probe, got.batches, got.steps, got.allreduce, got.on_data) == ("step", "1", 40, False, False)


@pytest.mark.parametrize(
    "reply, code",
    [
        ("STEP_SECONDS 8 0.025000\n", 1),  # it printed, then failed
        ("STEP_SECONDS 8 0.025000\n", 0),
    ],
)  # batch 16 is missing
def test_a_step_probe_that_fails_or_misses_a_batch_is_an_error_with_its_stderr(launches, reply, code):
    launches.reply, launches.code = reply, code
    with pytest.raises(RuntimeError, match="it broke"):
        probes.probe_step_seconds("s.yaml", 2, [8, 16])


def test_the_allreduce_probe_passes_the_cycle_to_its_ranks(launches):
    launches.reply = "[0]<stdout>:ALLREDUCE_SECONDS 0.004500000\n"
    assert probes.allreduce_seconds(2, 215668, 5.0) == 0.0045
    got = probe_args(launches[0]["args"])
    assert (got.probe, got.floats, got.cycle_ms) == ("allreduce", 215668, 5.0)
    launches.reply = ""
    with pytest.raises(RuntimeError, match="allreduce 215668 --cycle-ms 5.0 on 2 processes failed"):
        probes.allreduce_seconds(2, 215668, 5.0)


def test_the_idle_probe_sets_horovods_cycle_for_its_ranks(launches):
    launches.reply = "[0]<stdout>:IDLE_CPU_SHARE 0.019000000\n"
    assert probes.idle_cpu_share(2, 5.0, seconds=3.0) == 0.019
    assert launches[0]["env"] == {"HOROVOD_CYCLE_TIME": "5"}
    got = probe_args(launches[0]["args"])
    assert (got.probe, got.seconds) == ("idle", 3.0)


def test_the_paired_probe_launches_the_paired_entry_point_and_fails_with_its_stderr(launches):
    launches.reply = (
        '[1]<stdout>:noise\n[0]<stdout>:PAIRED_STEP_SECONDS {"without": [0.02, 0.03], "with": [0.03, 0.05]}\n'
    )
    assert probes.paired_allreduce("s.yaml", 2, 16, 2, steps=7) == (pytest.approx(0.025), pytest.approx(0.015))
    got = probe_args(launches[0]["args"])
    assert (got.probe, got.config, got.batch, got.steps, got.pairs) == ("paired-step", "s.yaml", 16, 7, 2)
    launches.reply, launches.code = "", 1
    with pytest.raises(RuntimeError, match="it broke"):
        probes.paired_allreduce("s.yaml", 2, 16, 2)


def test_the_paired_blocks_alternate_and_every_rank_syncs_alike(monkeypatch):
    """Blocks without (L) and with (A) the allreduce in the order L A, A L, L A, ... (a drift of
    the host then moves both alike), each block `steps` steps between two synchronisations,
    after 3 warm-up steps of each; the blocks' seconds come back in their kinds' lists."""
    log = []

    class Backend:
        def rank(self):
            return 0

        def allreduce_max(self, x):
            log.append("sync")
            return x

    monkeypatch.setattr(rank_probes, "trainable", lambda cfg, b, backend=None: "A" if backend else "L")
    monkeypatch.setattr(rank_probes, "training_step", lambda model, b, seed=0, cubes=None: lambda: log.append(model))
    without, paid = rank_probes.paired_step_seconds(None, Backend(), 16, steps=2, pairs=3)
    assert len(without) == len(paid) == 3
    blocks = "".join(x if x != "sync" else "|" for x in log)
    assert blocks == "LLLAAA" + "|LL||AA||AA||LL||LL||AA|"
