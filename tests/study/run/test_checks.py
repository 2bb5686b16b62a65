"""The stall check (checks.py): the runs the stall rule stopped, continued to the cap with the rule off."""
from deepdensity.study.run.checks import stall_check


def test_the_stall_check_continues_stopped_runs_and_a_run_that_reaches_counts_as_reached(tmp_path):
    """Every stalled run at N >= 16, of the others the preset's count; strong scaling (read off the
    sequential runs) is not continued; a continued run that reaches the target replaces the stopped one."""
    import json
    from types import SimpleNamespace
    from deepdensity.study.run.design import Book

    class Runner:
        def __init__(self):
            self.asked = []

        def run(self, name, mode, n, settings, continue_from=None):
            self.asked.append((name, mode, n, settings["stall_patience"], settings["base_lr"], continue_from))
            status = "reached_target" if name.startswith("warmup-n32") else "max_epochs"
            (tmp_path / name).mkdir()
            (tmp_path / name / "result.json").write_text(json.dumps({"status": status, "epochs": 40}))
            return {"status": status, "epochs": 40, "final_val_loss": 1.0}

        def run_all(self, jobs, label=""):
            return [job() for job in jobs]

    book = Book()
    stalled = {"status": "stalled", "epochs": 9}
    book.results = {("warmup", 32, 0): (stalled, "warmup-n32-s0"), ("linear", 16, 1): (stalled, "linear-n16-s1"),
                    ("weak", 4, 0): (stalled, "weak-n4-s0"), ("weak", 2, 0): (stalled, "weak-n2-s0"),
                    ("2eta", 1, 3): (stalled, "seq-2eta-s3"), ("strong", 8, 3): (stalled, "seq-s3"),
                    ("weak", 8, 0): ({"status": "reached_target", "epochs": 9}, "weak-n8-s0")}
    s = SimpleNamespace(study=SimpleNamespace(stall_check=3), runner=Runner(), root=tmp_path)
    proto = SimpleNamespace(eta=0.002, common=lambda: {"base_lr": repr(0.002), "target_loss": "1.0", "max_epochs": 64})
    rows = stall_check(s, proto, book)
    asked = {a[0]: a for a in s.runner.asked}
    assert [a[2] for a in s.runner.asked] == sorted(a[2] for a in s.runner.asked), \
        "the cheapest continuations (smallest N) first"
    assert set(asked) == {"warmup-n32-s0-to-cap", "linear-n16-s1-to-cap", "weak-n4-s0-to-cap",
                          "weak-n2-s0-to-cap", "seq-2eta-s3-to-cap"}, \
        "every one at N >= 16, then 3 of the others spread over their cells; never strong"
    assert all(a[3] == 0 for a in asked.values()), "the stall rule off"
    assert all(a[5] + "-to-cap" == name for name, a in asked.items()), "each from the run the rule stopped"
    assert asked["seq-2eta-s3-to-cap"][1:3] == ("strong", 1) and asked["seq-2eta-s3-to-cap"][4] == repr(0.004)
    assert [r["status"] for r in rows if r["run"] == "warmup-n32-s0-to-cap"] == ["reached_target"]
    assert book.results[("warmup", 32, 0)][1] == "warmup-n32-s0-to-cap"
    assert book.results[("linear", 16, 1)][1] == "linear-n16-s1", "a continued run that missed leaves the stopped one"
