

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
