"""Starting the processes of a run: horovodrun and `deepdensity launch` (horovodrun.py), the
controller a launch runs under (controllers.py), how an interrupt reaches the ranks (relay.py,
signals.py), the hosts' names (hosts.py), and Slurm: a training command as a job (slurm_jobs.py)
and a train.sbatch job submitted again (sbatch_resubmit.py). What trains one process is
training/; it uses controllers, hosts and signals of this package, nothing else."""
