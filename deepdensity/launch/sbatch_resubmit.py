"""The command that submits a job of scripts/slurm/train.sbatch again as it was submitted,
which the run prints when interrupted: run inside the job by train.sbatch as
`python -m deepdensity.launch.sbatch_resubmit resubmit-command -- ARGS`, it reads the job's
options from `scontrol show job` (else from the job's environment) and writes them back as
sbatch options (docs/cluster.md)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from deepdensity.utils.errors import UserError, shell_word

# scripts/slurm/train.sbatch's own defaults: an option equal to them is not repeated
SBATCH_SCRIPT = "scripts/slurm/train.sbatch"
SBATCH_JOB_NAME = "deepdensity"
SBATCH_OUTPUT = "slurm-%j.out"
# The knobs of train.sbatch read from the environment (docs/cluster.md): a resubmission sets
# them as the job had them.
SBATCH_ENV = ("PYTHON", "HOROVOD_ARGS", "REQUEUE")
# Fields of `scontrol show job` that take their whole line (their values may hold spaces).
_WHOLE_LINE = ("Command", "WorkDir", "Comment", "AdminComment", "SystemComment", "StdErr", "StdIn", "StdOut")
_UNSET = ("", "(null)", "N/A", "None", "*")


def parse_show_job(text: str) -> dict:
    """`scontrol show job ID` (several lines, not -o) as {field: value}."""
    fields = {}
    for line in text.splitlines():
        line = line.strip()
        key, sep, value = line.partition("=")
        if sep and key in _WHOLE_LINE:
            fields[key] = value.rstrip()
        elif line.startswith("JobId=") and " JobName=" in line:  # a job name may hold spaces
            head, _, name = line.partition(" JobName=")
            fields["JobId"], fields["JobName"] = head.split()[0].partition("=")[2], name
        else:
            for token in line.split():
                k, s, v = token.partition("=")
                if s:
                    fields.setdefault(k, v)
    return fields


def _fields_from_env(env) -> dict:
    """What the job's environment says of its submission, when scontrol cannot (no time limit)."""
    names = {
        "Partition": "SLURM_JOB_PARTITION",
        "Account": "SLURM_JOB_ACCOUNT",
        "QOS": "SLURM_JOB_QOS",
        "NumNodes": "SLURM_JOB_NUM_NODES",
        "NumTasks": "SLURM_NTASKS",
        "CPUs/Task": "SLURM_CPUS_PER_TASK",
        "JobName": "SLURM_JOB_NAME",
        "JobId": "SLURM_JOB_ID",
    }
    fields = {k: env[v] for k, v in names.items() if env.get(v)}
    if env.get("SLURM_NTASKS_PER_NODE"):
        fields["NtasksPerN:B:S:C"] = f"{env['SLURM_NTASKS_PER_NODE']}:0:*:*"
    return fields


def submitted_script(command: str, args: list, submit_dir: str) -> str:
    """The batch script's path as submitted, from the job's Command= (the script's path as
    sbatch resolved it, then its arguments joined by spaces); a relative one from the folder
    sbatch ran in. '' when it cannot be told."""
    joined = " ".join(args)
    if joined and command.endswith(" " + joined):
        path = command[: -len(joined) - 1]
    elif not joined or Path(command).is_file():
        path = command
    else:
        path = ""
    if path and not os.path.isabs(path) and submit_dir:
        path = os.path.join(submit_dir, path)
    return path


def resubmit_command(job: dict, args: list, env) -> str:
    """The `sbatch` command that submits train.sbatch again as this job was submitted: its
    script by the path the user gave (not Slurm's spool copy, which `$0` names inside the
    job), every resource option the job has (`scontrol show job`: partition, account, QoS, time,
    nodes, tasks, CPUs, memory, GPUs, constraints, node lists, output files, ...), its working
    folder, and the script's environment knobs. train.py adds its own arguments after it."""
    job_id = job.get("JobId") or env.get("SLURM_JOB_ID", "")
    submit_dir = env.get("SLURM_SUBMIT_DIR", "")
    script = submitted_script(job.get("Command", ""), args, submit_dir)
    if not script or not Path(script).is_file() or Path(script).name == "slurm_script":
        fallback = Path(submit_dir or ".") / SBATCH_SCRIPT
        script = str(fallback.resolve()) if fallback.is_file() else ""
    if not script:
        raise UserError(f"cannot tell the path job {job_id} was submitted with (Command={job.get('Command', '')!r})")

    def value(key: str) -> str:
        v = job.get(key, "")
        return "" if v in _UNSET else v

    opts = _resource_options(value)

    def add(flag: str, v: str) -> None:
        if v:
            opts.append(f"{flag}={v}")

    work_dir = value("WorkDir") or submit_dir
    # output files: the job's, its id back to %j (the next job writes its own); the script's
    # default (slurm-%j.out in the working folder) is left to the script
    out, err = value("StdOut"), value("StdErr")
    default_out = os.path.join(work_dir, SBATCH_OUTPUT.replace("%j", job_id)) if job_id else ""
    if out and out != default_out:
        add("--output", output_pattern(out, job_id))
    if err and err != out:
        add("--error", output_pattern(err, job_id))
    if value("StdIn") not in ("", "/dev/null"):
        add("--input", value("StdIn"))
    add("--chdir", work_dir)  # train.py is relative to it: the command works pasted anywhere
    knobs = [f"{k}={shell_word(env[k])}" for k in SBATCH_ENV if env.get(k)]
    return " ".join([*knobs, "sbatch", *(shell_word(o) for o in opts), shell_word(script)])


def output_pattern(path: str, job_id: str) -> str:
    """A job's output file (`scontrol show job`'s StdOut, %j already replaced) as the pattern it
    was given with: the job id back to %j in the file's name only. Slurm does not make an output
    file's folder, so a folder named after the job id would have had to exist before the id was
    known; a digit of the id in a folder's name (/tmp/test-all.2Y1ppb with job 1) is the
    folder's own."""
    if not job_id:
        return path
    folder, name = os.path.split(path)
    return os.path.join(folder, re.sub(rf"(?<![0-9]){re.escape(job_id)}(?![0-9])", "%j", name))


def _resource_options(value) -> list:
    """The job's resource options as sbatch flags, from `value(key)` of `scontrol show job`."""
    opts = []

    def add(flag: str, v: str) -> None:
        if v:
            opts.append(f"{flag}={v}")

    for flag, key in (
        ("--partition", "Partition"),
        ("--account", "Account"),
        ("--qos", "QOS"),
        ("--reservation", "Reservation"),
        ("--time", "TimeLimit"),
        ("--time-min", "TimeMin"),
        ("--nodes", "NumNodes"),
        ("--ntasks", "NumTasks"),
    ):
        add(flag, value(key))
    per_node = value("NtasksPerN:B:S:C").split(":")[0]
    add("--ntasks-per-node", per_node if per_node not in ("", "0") else "")
    cpus = value("CPUs/Task")
    add("--cpus-per-task", cpus if cpus not in ("", "1") else "")
    for flag, key in (("--mem", "MinMemoryNode"), ("--mem-per-cpu", "MinMemoryCPU"), ("--tmp", "MinTmpDiskNode")):
        add(flag, value(key) if value(key) not in ("0", "0M") else "")
    for flag, key in (
        ("--gres", "TresPerNode"),
        ("--gpus", "TresPerJob"),
        ("--gpus-per-task", "TresPerTask"),
        ("--gpus-per-socket", "TresPerSocket"),
        ("--cpus-per-gpu", "CpusPerTres"),
        ("--mem-per-gpu", "MemPerTres"),
    ):
        add(flag, _tres(value(key), gres=flag == "--gres"))
    for flag, key in (
        ("--constraint", "Features"),
        ("--nodelist", "ReqNodeList"),
        ("--exclude", "ExcNodeList"),
        ("--licenses", "Licenses"),
        ("--network", "Network"),
        ("--comment", "Comment"),
    ):
        add(flag, value(key))
    if value("MailType") not in ("", "NONE"):
        add("--mail-type", value("MailType"))
        add("--mail-user", value("MailUser"))
    add("--nice", value("Nice") if value("Nice") not in ("", "0") else "")
    opts += ["--contiguous"] * (value("Contiguous") == "1") + ["--no-requeue"] * (value("Requeue") == "0")
    opts += {
        "NO": ["--exclusive"],
        "USER": ["--exclusive=user"],
        "MCS": ["--exclusive=mcs"],
        "YES": ["--oversubscribe"],
    }.get(value("OverSubscribe"), [])
    add("--job-name", value("JobName") if value("JobName") != SBATCH_JOB_NAME else "")
    return opts


def _tres(value: str, gres: bool) -> str:
    """A TRES request as scontrol shows it (`gres:gpu:2`, `gres/gpu:a100:2`, several comma-
    separated) as sbatch takes it: `gpu:2` for --gres, and for --gpus*, the GPU part alone."""
    parts = []
    for item in filter(None, value.split(",")):
        item = (
            item.split(":", 1)[1]
            if item.startswith("gres:")
            else item.split("/", 1)[1]
            if item.startswith("gres/")
            else item
        )
        if gres:
            parts.append(item)
        elif item.startswith("gpu:"):
            parts.append(item[len("gpu:") :])
    return ",".join(parts)


def _main(argv: list) -> int:
    """`python -m deepdensity.launch.sbatch_resubmit resubmit-command [--] ARGS...`, inside a job of
    scripts/slurm/train.sbatch (ARGS: the script's arguments as submitted): the command that
    submits it again, on stdout. The job's record comes from `scontrol show job`, else
    (scontrol failing) from the job's environment, which has no time limit: said on stderr."""
    if argv[:1] != ["resubmit-command"]:
        print("usage: python -m deepdensity.launch.sbatch_resubmit resubmit-command [--] ARGS...", file=sys.stderr)
        return 2
    args = argv[1:]
    args = args[1:] if args[:1] == ["--"] else args
    env = os.environ
    job = {}
    if env.get("SLURM_JOB_ID"):
        try:
            proc = subprocess.run(
                ["scontrol", "show", "job", env["SLURM_JOB_ID"]], capture_output=True, text=True, timeout=60
            )
            job = parse_show_job(proc.stdout) if proc.returncode == 0 else {}
        except (OSError, subprocess.TimeoutExpired):
            job = {}
    if not job.get("Command"):
        print(
            f"deepdensity: warning: `scontrol show job {env.get('SLURM_JOB_ID', '')}` did not answer; the "
            f"resubmit command carries the job's partition, account, nodes and tasks from its environment, "
            f"not its time limit or other options",
            file=sys.stderr,
        )
        job = {**_fields_from_env(env), "WorkDir": os.getcwd(), **job}  # the job starts in its working folder
    try:
        print(resubmit_command(job, args, env))
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
