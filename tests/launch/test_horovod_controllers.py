"""Horovod's controller, MPI or Gloo (launch/controllers.py): what check-build says was built,
which controller a launch asks horovodrun for, what a run's record names, and mpirun's closing
notice after a refusal (no process is started here)."""

import pytest

from deepdensity.launch import controllers
from deepdensity.launch.controllers import MpirunNotice, asked_for, choose, controllers_in_check_build, of_this_run
from deepdensity.utils.errors import UserError
from tests.support import fed_through

CHECK_BUILD = """Horovod v0.28.1:

Available Frameworks:
    [X] TensorFlow
    [ ] PyTorch
    [ ] MXNet

Available Controllers:
    [{mpi}] MPI
    [X] Gloo

Available Tensor Operations:
    [ ] NCCL
    [ ] DDL
    [ ] CCL
    [{mpi}] MPI
    [X] Gloo
"""

# What OpenMPI 4.1's mpirun writes on stderr after a rank exited 2 (rank 0's own line first,
# cut by mpirun's tagging of what it read: the line, then its newline)
MPIRUN_AFTER_EXIT = """\
[1,0]<stderr>:error: output folder runs/x already holds a run; pass --resume to continue it[1,0]<stderr>:
--------------------------------------------------------------------------
Primary job  terminated normally, but 1 process returned
a non-zero exit code. Per user-direction, the job has been aborted.
--------------------------------------------------------------------------
--------------------------------------------------------------------------
mpirun detected that one or more processes exited with non-zero status, thus causing
the job to be terminated. The first process to do so was:

  Process name: [[16940,1],0]
  Exit code:    {code}
--------------------------------------------------------------------------
"""
ERROR_LINE = "[1,0]<stderr>:error: output folder runs/x already holds a run; pass --resume to continue it\n"


def filtered(text: str):
    return fed_through(MpirunNotice, text)


@pytest.mark.parametrize("mpi, expected", [("X", {"mpi", "gloo"}), (" ", {"gloo"})])
def test_check_build_is_read_for_the_controllers_alone(mpi, expected):
    # the MPI among the tensor operations below must not count as a controller
    assert controllers_in_check_build(CHECK_BUILD.format(mpi=mpi)) == expected
    assert controllers_in_check_build("horovodrun: command not found") == frozenset()


def executable(path, text: str):
    path.write_text(text)
    path.chmod(0o755)
    return str(path)


@pytest.mark.parametrize(
    "first, python",
    [
        ("#!{bin}/python3.11\n", "python3.11"),
        ("#!/usr/bin/env python3\n", "python3"),
        ("#!/bin/sh\n", None),  # a wrapper: check-build is read instead
        ("\x7fELF\x02", None),
        ("#!{bin}/python-missing\n", None),
    ],
)  # names an interpreter that is not there
def test_horovodruns_interpreter_is_read_off_its_first_line(tmp_path, monkeypatch, first, python):
    for name in ("python3.11", "python3"):
        executable(tmp_path / name, "#!/bin/sh\n")
    monkeypatch.setenv("PATH", str(tmp_path))
    script = executable(tmp_path / "horovodrun", first.format(bin=tmp_path) + "print('horovodrun')\n")
    assert controllers._interpreter(script) == (str(tmp_path / python) if python else None)
    assert controllers._interpreter(str(tmp_path / "absent")) is None


@pytest.fixture
def fresh_built():
    controllers.built.cache_clear()
    yield controllers.built
    controllers.built.cache_clear()


@pytest.mark.parametrize(
    "probe_says, expected", [("controllers: mpi gloo", {"mpi", "gloo"}), ("controllers:  gloo", {"gloo"}), ("", set())]
)
def test_built_asks_horovod_in_horovodruns_own_interpreter(tmp_path, fresh_built, probe_says, expected):
    """The interpreter is a stand-in that prints what Horovod's extension would; one that
    prints nothing (Horovod not importable there) gives no controller."""
    python = executable(tmp_path / "python3", f"#!/bin/sh\necho '{probe_says}'\n")
    script = executable(tmp_path / "horovodrun", f"#!{python}\n")
    assert fresh_built(script) == expected


@pytest.mark.parametrize("mpi, expected", [("X", {"mpi", "gloo"}), (" ", {"gloo"})])
def test_a_horovodrun_that_is_no_python_script_is_asked_for_its_check_build(tmp_path, fresh_built, mpi, expected):
    check_build = tmp_path / "check-build.txt"
    check_build.write_text(CHECK_BUILD.format(mpi=mpi))
    script = executable(tmp_path / "horovodrun", f'#!/bin/sh\n[ "$1" = --check-build ] && cat {check_build}\n')
    assert fresh_built(script) == expected
    assert fresh_built(str(tmp_path / "absent")) == frozenset()


@pytest.mark.slow
def test_built_says_what_the_installed_horovodruns_check_build_lists(fresh_built):
    """The reference is Horovod's own answer, `horovodrun --check-build`, read by the parser
    the tests above check against its text."""
    import subprocess

    from tests.support import horovodrun

    if not horovodrun():
        pytest.skip("horovodrun not installed")
    listed = controllers_in_check_build(
        subprocess.run([horovodrun(), "--check-build"], capture_output=True, text=True, timeout=300).stdout
    )
    assert listed and fresh_built(horovodrun()) == listed


@pytest.mark.parametrize(
    "options, env, expected",
    [
        (["-np", "2"], {}, None),  # horovodrun's default
        (["--gloo", "-np", "2"], {}, "gloo"),
        (["-np", "2", "--mpi"], {"DEEPDENSITY_CONTROLLER": "gloo"}, "mpi"),  # the flag wins
        (["-np", "2"], {"DEEPDENSITY_CONTROLLER": " Gloo "}, "gloo"),
        (["-np", "2"], {"DEEPDENSITY_CONTROLLER": ""}, None),
    ],
)
def test_the_controller_asked_for_is_the_flag_else_the_setting(options, env, expected):
    assert asked_for(options, env) == expected


@pytest.mark.parametrize(
    "options, env, said",
    [
        (["--gloo", "--mpi", "-np", "2"], {}, "one controller, not --mpi and --gloo"),
        (["-np", "2"], {"DEEPDENSITY_CONTROLLER": "nccl"}, "DEEPDENSITY_CONTROLLER must be mpi or gloo, not 'nccl'"),
    ],
)
def test_a_controller_asked_for_twice_or_unknown_is_one_error_line(options, env, said):
    with pytest.raises(UserError, match=said):
        asked_for(options, env)


@pytest.fixture
def built_with(monkeypatch):
    """Pretend horovodrun's check-build lists these controllers."""

    def pretend(*names):
        monkeypatch.setattr(controllers, "built", lambda horovodrun: frozenset(names))

    return pretend


def test_by_default_the_options_stay_and_mpi_ranks_yield_their_core(built_with):
    built_with("gloo")  # not even asked: the default costs no check-build
    options, env, note = choose(["-np", "2"], {}, "/bin/horovodrun")
    assert options == ["-np", "2"] and note is None
    assert env == {"OMPI_MCA_mpi_yield_when_idle": "1"}


def test_the_setting_becomes_horovodruns_flag(built_with):
    built_with("mpi", "gloo")
    assert choose(["-np", "2"], {"DEEPDENSITY_CONTROLLER": "gloo"}, "h")[0] == ["--gloo", "-np", "2"]
    assert choose(["-np", "2"], {"DEEPDENSITY_CONTROLLER": "mpi"}, "h")[0] == ["--mpi", "-np", "2"]
    assert choose(["--mpi", "-np", "2"], {"DEEPDENSITY_CONTROLLER": "mpi"}, "h")[0] == ["--mpi", "-np", "2"]


def test_mpi_asked_of_a_gloo_only_horovod_is_refused_with_what_to_do(built_with):
    built_with("gloo")
    with pytest.raises(UserError, match=r"built without MPI .*make install.*--gloo"):
        choose(["--mpi", "-np", "2"], {}, "h")
    with pytest.raises(UserError, match="built without MPI"):
        choose(["-np", "2"], {"DEEPDENSITY_CONTROLLER": "mpi"}, "h")


@pytest.mark.parametrize(
    "options, env, asked",
    [
        (["--mpi", "-np", "2", "--min-np", "1", "--max-np", "2", "--host-discovery-script", "./d.sh"], {}, "--mpi"),
        (["-np", "2", "--min-np=1", "-H", "a:1,b:1"], {"DEEPDENSITY_CONTROLLER": "mpi"}, "DEEPDENSITY_CONTROLLER=mpi"),
    ],
)
def test_elastic_stays_on_gloo_and_says_so_when_mpi_was_asked_for(built_with, options, env, asked):
    built_with("mpi", "gloo")
    chosen, extra, note = choose(options, env, "h")
    assert "--mpi" not in chosen and [o for o in options if o != "--mpi"] == chosen
    assert note.startswith("note: elastic training runs on Gloo") and asked in note and "\n" not in note


def test_elastic_asked_nothing_says_nothing(built_with):
    built_with("mpi", "gloo")
    assert choose(["-np", "2", "--host-discovery-script", "d.sh"], {}, "h") == (
        ["-np", "2", "--host-discovery-script", "d.sh"],
        {},
        None,
    )
    # --max-np alone does not make horovodrun elastic
    assert not controllers.is_elastic(["-np", "2", "--max-np", "4"])


@pytest.mark.parametrize(
    "env, expected",
    [
        (
            {"HOROVOD_CONTROLLER": "gloo", "HOROVOD_CPU_OPERATIONS": "gloo", "HOROVOD_SIZE": "2"},
            {"controller": "gloo", "transport": "TCP (Gloo)", "cpu_operations": "gloo"},
        ),
        (
            {"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "OMPI_MCA_btl": "^openib"},
            {
                "controller": "mpi",
                "transport": "shared memory (one host), OpenMPI btl ^openib",
                "cpu_operations": "mpi",
            },
        ),
        (
            {"OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"},
            {
                "controller": "mpi",
                "transport": "shared memory within a host, TCP between hosts",
                "cpu_operations": "mpi",
            },
        ),
        ({}, {"controller": None, "transport": None, "cpu_operations": None}),
        ({"OMPI_COMM_WORLD_SIZE": "1"}, {"controller": None, "transport": None, "cpu_operations": None}),
        # a process no launcher started, on Gloo by lone_process_env: still one process, no controller
        (dict(controllers.LONE_PROCESS_ENV), {"controller": None, "transport": None, "cpu_operations": None}),
    ],
)
def test_the_record_names_the_controller_the_launcher_started_the_ranks_under(env, expected):
    assert of_this_run(env) == expected


@pytest.mark.parametrize("code", [2, 130, 143])
def test_mpiruns_notice_goes_after_a_rank_explained_its_exit(code):
    said, exit_code = filtered(MPIRUN_AFTER_EXIT.format(code=code))
    assert said == ERROR_LINE and exit_code == code


def test_mpiruns_notice_stays_for_a_crash():
    text = MPIRUN_AFTER_EXIT.format(code=1)
    said, exit_code = filtered(text)
    assert exit_code == 1
    assert said == ERROR_LINE + text.split("\n", 1)[1], "both blocks, whole"


def test_other_output_passes_whole_and_a_block_cut_short_is_kept():
    other = (
        "[1,1]<stdout>:epoch 1\n----------------------------------------------------------\nhelp\n"
        "----------------------------------------------------------\n[1,0]<stdout>:done\n"
    )
    assert filtered(other) == (other, None)
    cut = "----------------------------------------------------------\nPrimary job  terminated normally\n"
    assert filtered(cut) == (cut, None)
    # a rank's own tag inside its line is dropped, another rank's line is not touched
    assert filtered("[1,0]<stdout>:a[1,0]<stdout>:b\n[1,1]<stdout>:c\n")[0] == "[1,0]<stdout>:ab\n[1,1]<stdout>:c\n"


def test_under_mpirun_a_line_leaves_a_rank_in_one_write():
    import io

    class Writes(io.RawIOBase):
        def __init__(self):
            self.chunks = []

        def writable(self):
            return True

        def write(self, b):
            self.chunks.append(bytes(b))
            return len(b)

    raw = Writes()
    unbuffered = io.TextIOWrapper(raw, write_through=True)  # python -u's stdout, over a raw stream
    print("STEP_SECONDS 32 0.124210", file=unbuffered)
    assert raw.chunks == [b"STEP_SECONDS 32 0.124210", b"\n"], "what mpirun tagged apart"
    raw.chunks.clear()
    alone = {}
    assert not controllers.under_mpirun(alone, (unbuffered,)) and alone == {}
    print("x", file=unbuffered)
    assert raw.chunks == [b"x", b"\n"], "nothing changed outside mpirun"
    raw.chunks.clear()
    assert controllers.under_mpirun({"OMPI_COMM_WORLD_SIZE": "2"}, (unbuffered,))
    print("STEP_SECONDS 32 0.124210", file=unbuffered)
    assert raw.chunks == [b"STEP_SECONDS 32 0.124210\n"]
    raw.chunks.clear()
    # several lines in one print (a run's start-up lines): the line-buffered stream alone writes
    # the last line apart from its newline; WholeLines holds it back for its newline
    print("mode=strong\nlr = 0.00105", file=unbuffered)
    assert raw.chunks == [b"mode=strong\nlr = 0.00105", b"\n"], "what plain horovodrun showed in CI"
    raw.chunks.clear()
    whole = controllers.whole_lines(unbuffered)
    assert controllers.whole_lines(whole) is whole and controllers.whole_lines(None) is None
    print("mode=strong\nlr = 0.00105", file=whole)
    print("a\nb\n\nc", end="", file=whole)
    whole.write("d\n")
    assert raw.chunks == [b"mode=strong\n", b"lr = 0.00105\n", b"a\nb\n\n", b"cd\n"]
    assert whole.encoding == unbuffered.encoding and whole.line_buffering  # the rest is the stream's


def test_a_rank_under_mpirun_yields_its_core_unless_the_user_said_otherwise():
    rank = {"OMPI_COMM_WORLD_SIZE": "2"}
    assert controllers.under_mpirun(rank, (None,)) and rank["OMPI_MCA_mpi_yield_when_idle"] == "1"
    own = {"OMPI_COMM_WORLD_SIZE": "2", "OMPI_MCA_mpi_yield_when_idle": "0"}
    controllers.under_mpirun(own, (None,))
    assert own["OMPI_MCA_mpi_yield_when_idle"] == "0"


@pytest.mark.parametrize(
    "env, wanted",
    [
        ({}, True),  # python train.py
        ({"SLURM_JOB_ID": "7", "SLURM_STEP_NUM_TASKS": "1"}, True),  # the same in a Slurm job step
        ({"SLURM_JOB_ID": "7", "SLURM_STEP_NUM_TASKS": "4"}, False),  # srun started four tasks of it
        ({"HOROVOD_GLOO_RENDEZVOUS_ADDR": "10.0.0.1", "HOROVOD_CONTROLLER": "gloo"}, False),  # horovodrun, elastic
        ({"HOROVOD_RANK": "0", "HOROVOD_SIZE": "2"}, False),  # horovodrun's Gloo
        ({"OMPI_COMM_WORLD_SIZE": "2"}, False),  # mpirun
        ({"PMI_RANK": "0"}, False),
        ({"PMI_SIZE": "2"}, False),
        ({"PMIX_RANK": "0"}, False),  # a PMI's launcher
        # srun under MpiDefault=pmix or pmi2 sets its PMI's variables in a step of one task too
        ({"PMIX_RANK": "0", "SLURM_STEP_NUM_TASKS": "1"}, True),
        ({"PMI_RANK": "0", "PMI_SIZE": "1"}, True),
        ({"HOROVOD_CONTROLLER": "mpi"}, False),  # the user's own choice
    ],
)
def test_a_process_no_launcher_started_runs_on_gloo_and_no_other_is_touched(env, wanted):
    """Horovod built with MPI starts MPI even in a lone process, and inside a Slurm job step
    OpenMPI without Slurm's PMI aborts there (the Slurm tests under the MPI build)."""
    assert controllers.lone_process_env(env) == (
        {"HOROVOD_CONTROLLER": "gloo", "HOROVOD_CPU_OPERATIONS": "gloo"} if wanted else {}
    )


def test_a_users_cpu_operations_stay_in_a_lone_process():
    assert controllers.lone_process_env({"HOROVOD_CPU_OPERATIONS": "mpi"}) == {"HOROVOD_CONTROLLER": "gloo"}


def test_the_lone_process_setting_holds_for_init_alone(monkeypatch):
    """Set while Horovod initialises, then gone, so that a process started afterwards (a test's
    or a study's `horovodrun -np 2` under MPI) does not inherit a world of one; a value the
    user set stays. Under the MPI build, tests that ran dist.setup in pytest's own process
    left HOROVOD_CONTROLLER=gloo behind, and every later `horovodrun -np 2` ran two lone ranks."""
    import os

    from deepdensity.training import dist

    monkeypatch.delenv("HOROVOD_CONTROLLER", raising=False)
    monkeypatch.setenv("HOROVOD_CPU_OPERATIONS", "mpi")
    with dist.set_for_init({"HOROVOD_CONTROLLER": "gloo", "HOROVOD_CPU_OPERATIONS": "gloo"}):
        assert os.environ["HOROVOD_CONTROLLER"] == "gloo" and os.environ["HOROVOD_CPU_OPERATIONS"] == "mpi"
    assert "HOROVOD_CONTROLLER" not in os.environ and os.environ["HOROVOD_CPU_OPERATIONS"] == "mpi"


def test_setup_in_a_process_no_launcher_started_leaves_its_environment_as_it_was(monkeypatch):
    import os

    from deepdensity.training import dist

    for name in ("HOROVOD_CONTROLLER", "HOROVOD_CPU_OPERATIONS") + controllers.LAUNCHED_BY + controllers.PMI_VARS:
        monkeypatch.delenv(name, raising=False)
    backend = dist.setup(1)[0]
    assert backend.size() == 1
    assert "HOROVOD_CONTROLLER" not in os.environ and "HOROVOD_CPU_OPERATIONS" not in os.environ
