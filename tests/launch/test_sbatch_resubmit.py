"""The command that submits a job of scripts/slurm/train.sbatch again as it was submitted
(launch/sbatch_resubmit.py), from `scontrol show job` or the job's environment, and the script
itself run as slurmd runs it; the real thing is tests/cluster/test_slurm.py."""

import shlex
import subprocess
import sys

import pytest

from tests.support import ROOT

# `scontrol show job` of a train.sbatch job as Slurm 22.05 prints it (several lines, not -o),
# submitted from CHECKOUT as
#   sbatch -p gpu -A proj42 --qos=high --time=1-02:00:00 -N 2 --ntasks-per-node=2 --cpus-per-task=8
#          --mem=64G --gres=gpu:2 -C skylake -x node7 --comment='two words' -J 'my run'
#          --mail-type=END --mail-user=me@lab -o logs/%x-%j.out scripts/slurm/train.sbatch ARGS
SHOW_JOB = """JobId=4242 JobName=my run
   UserId=me(1000) GroupId=me(1000) MCS_label=N/A
   Priority=4294901759 Nice=0 Account=proj42 QOS=high
   JobState=RUNNING Reason=None Dependency=(null)
   Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0
   RunTime=00:10:00 TimeLimit=1-02:00:00 TimeMin=N/A
   Partition=gpu AllocNode:Sid=login1:22111
   ReqNodeList=(null) ExcNodeList=node7
   NodeList=node[1-2]
   BatchHost=node1
   NumNodes=2 NumCPUs=32 NumTasks=4 CPUs/Task=8 ReqB:S:C:T=0:0:*:*
   TRES=cpu=32,mem=128G,node=2,billing=32,gres/gpu=4
   Socks/Node=* NtasksPerN:B:S:C=2:0:*:* CoreSpec=*
   MinCPUsNode=16 MinMemoryNode=64G MinTmpDiskNode=0
   Features=skylake DelayBoot=00:00:00
   OverSubscribe=OK Contiguous=0 Licenses=(null) Network=(null)
   Command=CHECKOUT/scripts/slurm/train.sbatch --mode strong --out runs/my run
   WorkDir=CHECKOUT
   Comment=two words 
   StdErr=CHECKOUT/logs/my run-4242.out
   StdIn=/dev/null
   StdOut=CHECKOUT/logs/my run-4242.out
   Power=
   MailUser=me@lab MailType=END
   TresPerNode=gres:gpu:2
"""


@pytest.fixture
def checkout(tmp_path):
    script = tmp_path / "scripts" / "slurm" / "train.sbatch"
    script.parent.mkdir(parents=True)
    script.write_text("#!/bin/bash\n")
    return tmp_path


def test_the_resubmit_command_names_the_submitted_script_with_every_option(checkout):
    from deepdensity.launch.sbatch_resubmit import parse_show_job, resubmit_command

    job = parse_show_job(SHOW_JOB.replace("CHECKOUT", str(checkout)))
    assert (job["JobName"], job["Comment"], job["Partition"]) == ("my run", "two words", "gpu")
    command = resubmit_command(
        job,
        ["--mode", "strong", "--out", "runs/my run"],
        {"SLURM_SUBMIT_DIR": str(checkout), "HOROVOD_ARGS": "--network-interface ib0"},
    )
    words = shlex.split(command)
    assert words[:2] == ["HOROVOD_ARGS=--network-interface ib0", "sbatch"]
    assert words[-1] == str(checkout / "scripts" / "slurm" / "train.sbatch"), "the script as submitted, no arguments"
    assert set(words[2:-1]) == {
        "--partition=gpu",
        "--account=proj42",
        "--qos=high",
        "--time=1-02:00:00",
        "--nodes=2",
        "--ntasks=4",
        "--ntasks-per-node=2",
        "--cpus-per-task=8",
        "--mem=64G",
        "--gres=gpu:2",
        "--constraint=skylake",
        "--exclude=node7",
        "--comment=two words",
        "--job-name=my run",
        "--mail-type=END",
        "--mail-user=me@lab",
        f"--output={checkout}/logs/my run-%j.out",
        f"--chdir={checkout}",
    }


def test_the_resubmit_command_leaves_the_scripts_defaults_to_it(checkout):
    """A job submitted with nothing but -N and --ntasks: its default partition and time limit
    are carried (the next job gets the same even if the defaults change), the script's own
    job name, output file and one CPU a task are not repeated."""
    from deepdensity.launch.sbatch_resubmit import parse_show_job, resubmit_command

    text = (
        SHOW_JOB.replace("CHECKOUT", str(checkout))
        .replace("JobName=my run", "JobName=deepdensity")
        .replace("my run-4242.out", "x")
        .replace(f"{checkout}/logs/x", f"{checkout}/slurm-4242.out")
        .replace("CPUs/Task=8", "CPUs/Task=1")
        .replace("MailUser=me@lab MailType=END", "")
        .replace("Comment=two words", "")
        .replace("QOS=high", "QOS=(null)")
    )
    for drop in ("ExcNodeList=node7", "Features=skylake", "MinMemoryNode=64G", "TresPerNode=gres:gpu:2"):
        text = text.replace(drop, "")
    words = shlex.split(
        resubmit_command(
            parse_show_job(text), ["--mode", "strong", "--out", "runs/my run"], {"SLURM_SUBMIT_DIR": str(checkout)}
        )
    )
    assert words[1:] == [
        "--partition=gpu",
        "--account=proj42",
        "--time=1-02:00:00",
        "--nodes=2",
        "--ntasks=4",
        "--ntasks-per-node=2",
        f"--chdir={checkout}",
        str(checkout / "scripts/slurm/train.sbatch"),
    ]


def test_a_relative_or_vanished_script_path_is_found_from_the_submit_folder(checkout, tmp_path):
    from deepdensity.launch.sbatch_resubmit import resubmit_command, submitted_script

    assert submitted_script("scripts/slurm/train.sbatch --out r", ["--out", "r"], str(checkout)) == str(
        checkout / "scripts/slurm/train.sbatch"
    )
    # a Command= naming Slurm's spool copy, or a script since moved: the checkout's script
    for command in ("/var/spool/slurmd/job00042/slurm_script --out r", str(tmp_path / "gone.sbatch") + " --out r"):
        words = shlex.split(
            resubmit_command({"Command": command, "JobId": "42"}, ["--out", "r"], {"SLURM_SUBMIT_DIR": str(checkout)})
        )
        assert words[-1] == str(checkout / "scripts/slurm/train.sbatch")


def test_inside_a_job_the_command_comes_from_scontrol_else_from_the_environment(checkout, tmp_path):
    """`python -m deepdensity.launch.sbatch_resubmit resubmit-command -- ARGS` as train.sbatch runs it, with
    scontrol answering (a script on PATH printing a real record), then failing."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = tmp_path / "record.txt"
    record.write_text(SHOW_JOB.replace("CHECKOUT", str(checkout)))
    (bin_dir / "scontrol").write_text(f'#!/bin/sh\n[ "$3" = 4242 ] && cat {record}\n')
    (bin_dir / "scontrol").chmod(0o755)
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "PYTHONPATH": str(ROOT),
        "SLURM_JOB_ID": "4242",
        "SLURM_SUBMIT_DIR": str(checkout),
        "SLURM_JOB_PARTITION": "gpu",
        "SLURM_JOB_NUM_NODES": "2",
        "SLURM_NTASKS": "4",
        "PYTHON": sys.executable,
    }
    args = [
        sys.executable,
        "-m",
        "deepdensity.launch.sbatch_resubmit",
        "resubmit-command",
        "--",
        "--out",
        "runs/my run",
    ]
    proc = subprocess.run(args, env=env, capture_output=True, text=True, cwd=checkout)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert "--time=1-02:00:00" in proc.stdout and proc.stdout.startswith(f"PYTHON={sys.executable} sbatch ")
    # the module's path before it moved to launch/, which a job submitted earlier still runs
    # (Slurm keeps the script as submitted): the same answer
    old = subprocess.run(
        [*args[:2], "deepdensity.training.sbatch_resubmit", *args[3:]],
        env=env,
        capture_output=True,
        text=True,
        cwd=checkout,
    )
    assert (old.returncode, old.stdout, old.stderr) == (0, proc.stdout, "")
    (bin_dir / "scontrol").write_text(
        "#!/bin/sh\necho 'slurm_load_jobs error: Unable to contact slurm controller' >&2\nexit 1\n"
    )
    proc = subprocess.run(args, env=env, capture_output=True, text=True, cwd=checkout)
    assert proc.returncode == 0 and "not its time limit" in proc.stderr
    assert shlex.split(proc.stdout)[1:] == [
        "sbatch",
        "--partition=gpu",
        "--nodes=2",
        "--ntasks=4",
        f"--chdir={checkout}",
        str(checkout / "scripts/slurm/train.sbatch"),
    ]


# what `horovodrun --check-build` says of a build with both controllers, for `deepdensity launch`,
# which the script runs, to find them (controllers.built)
CHECK_BUILD = (
    '[ "$1" = --check-build ] && { printf "Available Controllers:\\n    [X] MPI\\n    [X] Gloo\\n'
    'Available Tensor Operations:\\n"; exit 0; }\n'
)


def test_train_sbatch_run_from_its_spool_copy_names_the_submitted_script(checkout, tmp_path):
    """scripts/slurm/train.sbatch as slurmd runs it: a copy in the spool folder ($0), in the
    submit folder, with scontrol and horovodrun replaced by scripts (horovodrun prints the
    resubmit command the run would print; `deepdensity launch` runs it as the script's). The real thing:
    tests/cluster/test_slurm.py."""
    spool = tmp_path / "spool" / "job00042" / "slurm_script"
    spool.parent.mkdir(parents=True)
    spool.write_text((ROOT / "scripts" / "slurm" / "train.sbatch").read_text())
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = tmp_path / "record.txt"
    record.write_text(
        SHOW_JOB.replace("CHECKOUT", str(checkout)).replace(" --mode strong --out runs/my run", " --out r")
    )
    (bin_dir / "scontrol").write_text(
        f'#!/bin/sh\ncase "$2" in hostnames) echo node1; echo node2;; job) cat {record};; esac\n'
    )
    (bin_dir / "horovodrun").write_text(f'#!/bin/sh\n{CHECK_BUILD}echo "relaunch: $DEEPDENSITY_RELAUNCH"\n')
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "PYTHONPATH": str(ROOT),
        "PYTHON": sys.executable,
        "DEEPDENSITY_HOROVODRUN": str(bin_dir / "horovodrun"),
        "SLURM_JOB_ID": "4242",
        "SLURM_SUBMIT_DIR": str(checkout),
        "SLURM_JOB_NODELIST": "node[1-2]",
        "SLURM_TASKS_PER_NODE": "2(x2)",
        "SLURM_NTASKS": "4",
        "SLURM_JOB_NUM_NODES": "2",
    }
    proc = subprocess.run(
        ["bash", str(spool), "--out", "r"], cwd=checkout, env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    said = proc.stdout.split("relaunch: ", 1)[1].strip()
    assert "slurm_script" not in said and said.endswith(f" {checkout}/scripts/slurm/train.sbatch")
    assert "--partition=gpu --account=proj42 --qos=high --time=1-02:00:00 --nodes=2 --ntasks=4" in said
    # the resubmit command not to be had (its module fails): the script's own fallback, still
    # the checkout's script; the run itself starts as before
    failing = bin_dir / "python-without-resubmit"
    failing.write_text(f'#!/bin/sh\ncase "$*" in *sbatch_resubmit*) exit 1;; esac\nexec {sys.executable} "$@"\n')
    failing.chmod(0o755)
    proc = subprocess.run(
        ["bash", str(spool), "--out", "r"],
        cwd=checkout,
        env={**env, "PYTHON": str(failing)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (
        proc.stdout.split("relaunch: ", 1)[1].strip()
        == f"sbatch --nodes=2 --ntasks=4 {checkout}/scripts/slurm/train.sbatch"
    )
    assert "warning: the resubmit command keeps only the nodes and tasks" in proc.stderr


@pytest.mark.parametrize(
    "horovod_args, want",
    [
        (None, ["-np", "4", "-H", "node1:2,node2:2", "--gloo"]),  # Gloo unless asked otherwise
        ("--network-interface ib0", ["-np", "4", "-H", "node1:2,node2:2", "--gloo", "--network-interface", "ib0"]),
        ("--mpi", ["-np", "4", "-H", "node1:2,node2:2", "--mpi"]),  # asked for: no --gloo beside it
        (
            "--gloo --network-interface ib0",
            ["-np", "4", "-H", "node1:2,node2:2", "--gloo", "--network-interface", "ib0"],
        ),
    ],
)
def test_train_sbatch_runs_the_ranks_under_gloo_unless_horovod_args_names_a_controller(
    checkout, tmp_path, horovod_args, want
):
    """The Gloo path is the one tests/cluster/test_slurm.py runs on two hosts; mpirun from the
    batch script is not tested, so the script asks for it only when HOROVOD_ARGS does."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text('#!/bin/sh\ncase "$2" in hostnames) echo node1; echo node2;; esac\n')
    (bin_dir / "horovodrun").write_text(f'#!/bin/sh\n{CHECK_BUILD}for a in "$@"; do echo "arg: $a"; done\n')
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "PYTHONPATH": str(ROOT),
        "PYTHON": sys.executable,
        "DEEPDENSITY_HOROVODRUN": str(bin_dir / "horovodrun"),
        "SLURM_JOB_ID": "4242",
        "SLURM_SUBMIT_DIR": str(checkout),
        "SLURM_JOB_NODELIST": "node[1-2]",
        "SLURM_TASKS_PER_NODE": "2(x2)",
        "SLURM_NTASKS": "4",
        "SLURM_JOB_NUM_NODES": "2",
        **({"HOROVOD_ARGS": horovod_args} if horovod_args else {}),
    }
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "slurm" / "train.sbatch"), "--out", "r"],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    args = [line[5:] for line in proc.stdout.splitlines() if line.startswith("arg: ")]
    assert args[: len(want)] == want and args[len(want) :] == [sys.executable, "train.py", "--out", "r"], proc.stdout


def test_only_the_output_files_name_gets_its_job_id_back_as_percent_j():
    """CI's temporary folder /tmp/test-all.2Y1ppb held job 1's log: the 1 in the folder's name
    became %j, and the resubmitted job's log went to a folder that did not exist (Slurm then runs
    nothing). Slurm makes no output folder, so only the file's name can hold the job id."""
    from deepdensity.launch.sbatch_resubmit import output_pattern

    assert output_pattern("/tmp/test-all.2Y1ppb/c/job-1.log", "1") == "/tmp/test-all.2Y1ppb/c/job-%j.log"
    assert output_pattern("/runs/42/slurm-42.out", "42") == "/runs/42/slurm-%j.out"
    assert output_pattern("/runs/job-421.out", "42") == "/runs/job-421.out", "another number holding the id"
    assert output_pattern("/runs/a_7_b_7.log", "7") == "/runs/a_%j_b_%j.log"
    assert output_pattern("/runs/log.txt", "") == "/runs/log.txt"
