"""Starting the processes of a run: horovodrun and `deepdensity launch` (horovodrun.py, and
launcher_output.py for what horovodrun prints), the controller a launch runs under
(controllers.py), how an interrupt reaches the ranks (relay.py, signals.py) and how the run goes
on (continuing.py), the hosts' names (hosts.py), and Slurm: a training command as a job
(slurm_jobs.py, a job's state by squeue in slurm_queue.py) and a train.sbatch job submitted again
(sbatch_resubmit.py). What trains one process is
training/; it uses controllers, hosts and signals of this package, nothing else."""
