"""`python -m deepdensity.training.sbatch_resubmit`: the command scripts/slurm/train.sbatch ran
before the module moved to launch/sbatch_resubmit.py. Slurm keeps a job's script as it was
submitted, so a job submitted before the move and requeued after it still runs this path; it
runs the module where it is now (by name: training/ does not import launch's Slurm modules)."""

import runpy

if __name__ == "__main__":
    runpy.run_module("deepdensity.launch.sbatch_resubmit", run_name="__main__", alter_sys=True)
