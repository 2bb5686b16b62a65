def test_start_up_noise_is_dropped_and_everything_else_kept_even_from_c():
    """Through file descriptor 2 (as TensorFlow's C++ writes), and with the last line written
    just before the process ends abruptly (os._exit), which a filter in a thread would lose."""
    import subprocess
    import sys

    code = (
        "import os; from deepdensity.utils.machine import drop_start_up_noise; drop_start_up_noise(); "
        "os.write(2, b'first\\nI0000 x] Compiled cluster using XLA!  This line is logged at most once\\n'); "
        "os.write(2, b'WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\\n'); "
        "os.write(2, b'error: last words\\n'); os._exit(3)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 3
    assert proc.stderr == "first\nerror: last words\n"


def test_a_nul_byte_on_stderr_does_not_swallow_what_follows():
    """grep reads a stream with a NUL byte as binary and, without -a, prints "binary file
    matches" in place of every line: a rank's traceback after such a byte would be lost."""
    import subprocess
    import sys

    code = (
        "import os; from deepdensity.utils.machine import drop_start_up_noise; drop_start_up_noise(); "
        "os.write(2, b'before\\n\\x00raw\\nCompiled cluster using XLA!\\nafter\\n'); os._exit(0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=30)
    assert proc.stderr == b"before\n\x00raw\nafter\n"


def test_onednn_isa_is_asked_once_per_process_and_again_when_its_cap_changes(monkeypatch):
    """A study's record, runner and ISA check all ask; each probe starts TensorFlow (2 s).
    Capped by ONEDNN_MAX_CPU_ISA, the answer differs, so the cap is asked about anew; a probe
    that could not say (a timeout under load) is asked again."""
    import subprocess

    from deepdensity.utils import machine

    probes, answers = [], {}

    def fake_run(command, env, **kwargs):
        probes.append(env.get("ONEDNN_MAX_CPU_ISA"))
        said = answers.get(env.get("ONEDNN_MAX_CPU_ISA"), "onednn_verbose,info,cpu,isa:Intel AVX-512\n")
        return subprocess.CompletedProcess(command, 0, said, "")

    monkeypatch.setattr(machine, "_ISA_SEEN", {})
    monkeypatch.setattr(machine.subprocess, "run", fake_run)
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    assert [machine.onednn_isa() for _ in range(3)] == ["Intel AVX-512"] * 3 and probes == [None]
    answers["AVX2"] = "onednn_verbose,info,cpu,isa:Intel AVX2\n"
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert machine.onednn_isa() == "Intel AVX2" and probes == [None, "AVX2"]
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA")
    assert machine.onednn_isa() == "Intel AVX-512" and probes == [None, "AVX2"]
    answers["SSE41"] = ""  # oneDNN said nothing this time
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "SSE41")
    assert [machine.onednn_isa() for _ in range(2)] == ["unknown"] * 2 and probes == [None, "AVX2", "SSE41", "SSE41"]
