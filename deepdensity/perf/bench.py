"""`make bench`: where a training step of the paper's model goes on this machine, against the roof.

    python -m deepdensity.bench [--config configs/paper.yaml] [--repeats 20] [--quick]

Prints, and writes to runs/bench.json (--out; `make bench OUT=reports/bench.json` refreshes
the committed figures):
  - the CPU, the instruction set oneDNN and the rendering kernel use, and which rendering
    the `rendering` setting picks here;
  - the roof measured here: a large float32 matmul, the model's first Conv3D, exponentials
    per second (the kernel's, XLA's, TensorFlow's) and memory bandwidth;
  - at per-worker batches 1..32 and the global batches emulation uses (256, 1024; cut into
    slices of `max_pass_batch`): the step, the step with a trivial rendering (TrivialDensity)
    for the rendering's share, the rendering alone (as configured and with TensorFlow ops)
    against its roof, and the former direct rendering's step (DirectDeepDensity), all taking
    turns in one run, so that shares and speed-ups are ratios on one machine at one moment;
  - the model's FLOPs per sample, counted from its layers, and the achieved GFLOP/s;
  - the step at batch 32 under each `xla` setting (off, coefficients, whole step);
  - samples/s of `horovodrun -np 2` against one process on the same cores; its step split
    into compute and allreduce, and the allreduce split by Horovod's timeline and by the
    ranks' own clocks (the wait for the last rank, then the allreduce once all have called,
    rank_waits.py); the Gloo allreduce of the model's gradients alone at N = 2 and 4, and at
    N = 2 under shorter Horovod cycles;
  - samples/s of `horovodrun -np 2` against one process under each controller built, MPI and
    Gloo, with each one's allreduce split by the ranks' clocks (controller_figures.py);
  - peak resident memory of weak N = 32 emulation (global batch 1024) at K = 50.
Figures only: nothing here passes or fails.
"""

from __future__ import annotations

import argparse

from deepdensity.utils.args import parser
from deepdensity.utils.errors import command


def _parser() -> argparse.ArgumentParser:
    ap = parser(__doc__, "python -m deepdensity.bench")
    ap.add_argument("--config", default="configs/paper.yaml", help="the model's settings (the paper's)")
    ap.add_argument("--repeats", type=int, default=20, help="timed repeats per figure, a quarter above batch 32")
    ap.add_argument("--quick", action="store_true", help="step times only (no Horovod, no memory runs)")
    ap.add_argument(
        "--out",
        default="runs/bench.json",
        help="the figures as JSON (default runs/bench.json; the committed ones are reports/bench.json)",
    )
    ap.add_argument(
        "--horovod",
        action="store_true",
        help="only horovodrun -np 2 against one process (paired runs); written into --out's "
        "'horovod' entry, the rest of that file kept",
    )
    ap.add_argument(
        "--profile",
        action="store_true",
        help="only where a step's time goes, at batch 1 and 32 (traces beside --out); written "
        "into --out's 'profiles' entry, the rest of that file kept",
    )
    ap.add_argument("--pairs", type=int, default=5, help="with --horovod or --controllers: paired runs A B A B ...")
    ap.add_argument(
        "--controllers",
        action="store_true",
        help="only horovodrun -np 2 against one process under MPI and under Gloo (rounds of "
        "--pairs); written into --out's 'controllers' entry, the rest of that file kept",
    )
    return ap


@command
def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    # TensorFlow once the flags are read: --help and a refused flag need none
    from deepdensity.perf.bench_run import run

    return run(args)


if __name__ == "__main__":
    raise SystemExit(main())
