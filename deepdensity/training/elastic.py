"""Elastic training (Horovod elastic, docs/cluster.md): train, and whenever workers leave (a
failure, a host gone from the discovery script) go back to the state committed after the
last whole epoch and go on at the new N. Through Horovod's public elastic API: the state is
hvd.elastic.KerasState, the loop hvd.elastic.run, the commit a callback after each epoch."""

from __future__ import annotations

from dataclasses import replace

from deepdensity.scaling import rules
from deepdensity.training import callbacks
from deepdensity.training.fit import Training, fit
from deepdensity.training.launch import Launch, as_launch
from deepdensity.training.run_folder import append_workers_change, keep_rows_up_to, last_workers
from deepdensity.training.runs import read_json


def fit_elastic(t: Training, initial_epoch: int) -> tuple:
    """Returns (this process's part in the run at the end, the last checkpoint's state)."""
    cfg, run, model, record = t.cfg, t.run, t.model, t.record
    record.elastic = True
    commit = callbacks.CommitEachEpoch(None, record, run.processes)
    # a resumed run starts from the N it last trained with, so a new N is recorded as a change
    before = last_workers(run.out) if (run.writes and initial_epoch) else run.processes
    # Horovod: the state every worker restores after a change: weights, optimizer, and ours
    # (rank 0's values reach every worker in the state's first sync).
    commit.state = run.backend.elastic_state(
        model, model.optimizer, epoch=initial_epoch, workers=before, record=record.snapshot()
    )
    ended = {}

    def from_last_commit(state):
        now = as_launch(cfg, run.p.mode, run.backend, run.threads, run.backend.size(), run.out, t.verbose, True)
        steps = rules.steps_per_epoch(len(t.data[0]), now.p, cfg.epoch_definition)
        if state.workers != now.processes:
            workers_changed(now, state.epoch, commit.steps_since_commit, state.workers)
        if now.writes:  # whole epochs only: none counted twice after a failure
            keep_rows_up_to(now.out, state.epoch)
        record.restore(state.record, now.p, steps)
        commit.workers, commit.steps_since_commit = now.processes, 0
        model.set_grad_slices(rules.grad_slices(now.p.per_process_batch, cfg.max_pass_batch))
        saved = (
            read_json(run.out / "state.json", "run state")
            if (now.writes and (run.out / "state.json").exists())
            else None
        )
        ended["run"] = now
        ended["saved"] = fit(replace(t, run=now, steps=steps, commit=commit), state.epoch, saved)

    run.backend.elastic_run(from_last_commit)(commit.state)
    return ended["run"], ended["saved"]


def workers_changed(now: Launch, epoch: int, lost_steps: int, before: int) -> None:
    """Say and record (workers.jsonl, rank 0) a change of N: after which whole epoch (counted
    from 1), how many steps of the next one were trained and dropped, N before and after."""
    now.tell(
        f"workers: {before} -> {now.processes} after epoch {epoch}; going on from that epoch's "
        f"committed state ({lost_steps} steps of epoch {epoch + 1} trained since are dropped)"
    )
    if now.writes:
        append_workers_change(
            now.out, {"epoch": epoch, "step": lost_steps, "old_workers": before, "new_workers": now.processes}
        )
