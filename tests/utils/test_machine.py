

def test_start_up_noise_is_dropped_and_everything_else_kept_even_from_c():
    """Through file descriptor 2 (as TensorFlow's C++ writes), and with the last line written
    just before the process ends abruptly (os._exit), which a filter in a thread would lose."""
    import subprocess
    import sys
    code = ("import os; from deepdensity.utils.machine import drop_start_up_noise; drop_start_up_noise(); "
            "os.write(2, b'first\\nI0000 x] Compiled cluster using XLA!  This line is logged at most once\\n'); "
            "os.write(2, b'WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\\n'); "
            "os.write(2, b'error: last words\\n'); os._exit(3)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 3
    assert proc.stderr == "first\nerror: last words\n"


def test_a_nul_byte_on_stderr_does_not_swallow_what_follows():
    """grep reads a stream with a NUL byte as binary and, without -a, prints "binary file
    matches" in place of every line: a rank's traceback after such a byte would be lost."""
    import subprocess
    import sys
    code = ("import os; from deepdensity.utils.machine import drop_start_up_noise; drop_start_up_noise(); "
            "os.write(2, b'before\\n\\x00raw\\nCompiled cluster using XLA!\\nafter\\n'); os._exit(0)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=30)
    assert proc.stderr == b"before\n\x00raw\nafter\n"
