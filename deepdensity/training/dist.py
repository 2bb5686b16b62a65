"""Everything Horovod. The only module that imports it.

Order as in Horovod's tensorflow2_keras_mnist example: init, pin, (scale: rules.py),
wrap the optimizer, callbacks. Without Horovod's launcher, hvd.init() gives a world of
one and the same code runs as a single worker. If Horovod is not installed at all,
`Single` stands in, so the model and the tests of pure parts still work.
"""

from __future__ import annotations

import contextlib
import os

import tensorflow as tf

from deepdensity.launch import controllers
from deepdensity.launch.hosts import check_hosts
from deepdensity.model.autograph_rules import leave_to_graph_mode
from deepdensity.utils.machine import drop_start_up_noise
from deepdensity.utils.stack import require_patched_horovod

try:
    import horovod.tensorflow as hvd_tf
    import horovod.tensorflow.keras as hvd
    from horovod.common.exceptions import HorovodInternalError
except ImportError:  # pragma: no cover - exercised only where Horovod is missing
    hvd = hvd_tf = None


# Horovod's TensorFlow functions are graph code (TensorFlow 1's): not converted (autograph_rules.py)
if hvd is not None:
    leave_to_graph_mode("horovod")


def horovod_version():
    """Horovod's version string, or None where it is not installed (recorded in config.json)."""
    if hvd is None:
        return None
    import horovod

    return horovod.__version__


class Single:
    """One process, no Horovod."""

    available = False

    def rank(self) -> int:
        return 0

    def size(self) -> int:
        return 1

    def local_rank(self) -> int:
        return 0

    def local_size(self) -> int:
        return 1

    def wrap_optimizer(self, opt, groups: int = 0):
        return opt

    def callbacks(self, broadcast_after_first_step: bool = True):
        return []

    def broadcast_state(self, model, optimizer):
        pass

    def allreduce_max(self, value: float) -> float:
        return value

    def average(self, tensors: list) -> list:
        """The mean of each tensor over the processes (in a training step or eagerly)."""
        return list(tensors)

    def average_named(self, tensor, name: str):
        """The mean of one tensor over the processes, an allreduce named `name`."""
        return tensor

    def gather(self, obj) -> list:
        """Every process's `obj` (picklable), in rank order."""
        return [obj]

    def broadcast_object(self, obj):
        """Rank 0's `obj` (picklable) on every process."""
        return obj

    def elastic_launched(self) -> bool:
        """Was this process started by an elastic horovodrun (--min-np, --max-np, discovery)?"""
        return False


class Horovod(Single):
    available = True

    def __init__(self):
        # A host name that does not resolve (or resolves to loopback, for Gloo across hosts)
        # makes hvd.init() abort with no word of why.
        check_hosts(os.environ)
        # Horovod: initialise the process group (a world of 1 without horovodrun).
        hvd.init()

    def rank(self):
        return hvd.rank()

    def size(self):
        return hvd.size()

    def local_rank(self):
        return hvd.local_rank()

    def local_size(self):
        return hvd.local_size()

    def wrap_optimizer(self, opt, groups: int = 0):
        # Horovod: average gradients across workers with allreduce before each update, in
        # `groups` fused allreduces per step (0: Horovod's default, one per gradient).
        return hvd.DistributedOptimizer(opt, groups=groups or None)

    def callbacks(self, broadcast_after_first_step: bool = True):
        # Horovod: make every worker start from rank 0's weights and optimizer state. The
        # callback broadcasts after the first step, which would undo local SGD's first local
        # step on the other workers; broadcast_state below already covers the start.
        broadcast = [hvd.callbacks.BroadcastGlobalVariablesCallback(0)] if broadcast_after_first_step else []
        return broadcast + [
            # Horovod: average the epoch's metrics over workers; must precede any callback
            # that reads them (stopping rules, logging, checkpoints).
            hvd.callbacks.MetricAverageCallback(),
        ]

    def broadcast_state(self, model, optimizer):
        # Horovod: the callback above broadcasts only after the first step (optimizer slots
        # do not exist before), so a resumed or freshly built state is broadcast here too:
        # the first step must already start from identical weights on all workers.
        create_slots(model, optimizer)
        hvd_tf.broadcast_variables(model.variables, root_rank=0)
        hvd_tf.broadcast_variables(optimizer.variables(), root_rank=0)

    def allreduce_max(self, value: float) -> float:
        # Horovod: a decision every worker must take together (e.g. stop) from local values.
        return float(hvd_tf.allreduce(tf.constant(float(value)), op=hvd_tf.Max))

    def gather(self, obj) -> list:
        # Horovod: every rank's settings, so that ranks started with other ones stop together.
        return list(hvd_tf.allgather_object(obj)) if hvd.size() > 1 else [obj]

    def broadcast_object(self, obj):
        # Horovod: what rank 0 alone read (the run folder's resume point) reaches every rank.
        # One name whatever the type: Horovod names the op by type(obj) otherwise, and ranks
        # holding None where rank 0 holds a str would wait on different ops.
        return hvd_tf.broadcast_object(obj, root_rank=0, name="from_chief") if hvd.size() > 1 else obj

    def elastic_launched(self) -> bool:
        # Horovod: an elastic horovodrun marks its workers so (gloo_run.py sets HOROVOD_ELASTIC).
        return os.environ.get("HOROVOD_ELASTIC") == "1"

    def elastic_state(self, model, optimizer, **saved):
        # Horovod: what an elastic job commits to memory and every worker restores after a
        # change of workers: the weights, the optimizer's slots and iterations, and `saved`.
        return hvd.elastic.KerasState(model, optimizer, **saved)

    def elastic_run(self, func):
        # Horovod: run func(state) again from the last commit whenever workers leave or join
        # (the world is re-initialised at the new size and the state broadcast from rank 0).
        # Horovod's own wrapper turns only errors naming HorovodAllreduce, HorovodAllgather or
        # HorovodBroadcast into a reset and silently returns None on any other UnknownError;
        # a lost peer also fails the grouped allreduce, so every Horovod op's error is a reset
        # here and any other error goes on up as itself.
        def resetting_on_lost_peers(state):
            try:
                return func(state)
            except tf.errors.UnknownError as e:
                if "Horovod" in e.message:
                    raise HorovodInternalError(e) from None
                raise RuntimeError(e.message) from e

        return hvd.elastic.run(resetting_on_lost_peers)

    def average(self, tensors: list) -> list:
        # Horovod: one fused allreduce of several tensors, for the modes that average by hand
        # (adaptive: gradients and their squared norm; local: weights and Adam's moments).
        if hvd.size() == 1:
            return list(tensors)
        return hvd_tf.grouped_allreduce(list(tensors), op=hvd_tf.Average)

    def average_named(self, tensor, name: str):
        # Horovod: one allreduce under a fixed name; after the first call Horovod answers the
        # name from its response cache, as it does a training step's gradients.
        return hvd_tf.allreduce(tensor, op=hvd_tf.Average, name=name)


def create_slots(model, optimizer):
    """Create the optimizer's slot variables now (Keras makes them lazily at the first step),
    so they can be restored from a checkpoint or broadcast before training starts."""
    if hasattr(optimizer, "_create_all_weights"):  # tf.keras.optimizers.legacy
        optimizer._create_all_weights(model.trainable_variables)
    else:
        optimizer.build(model.trainable_variables)


HOROVOD_DEFAULT_CYCLE_MS = 1.0  # Horovod 0.21 and later


def cycle_time_env(cycle_ms: float) -> dict:
    """The environment that gives Horovod's background thread a `cycle_ms` cycle: {} when
    cycle_ms is 0 (Horovod's own default) or the user already set HOROVOD_CYCLE_TIME."""
    if cycle_ms <= 0 or "HOROVOD_CYCLE_TIME" in os.environ:
        return {}
    return {"HOROVOD_CYCLE_TIME": f"{cycle_ms:g}"}


def cycle_ms_in_effect(cycle_ms: float = 0.0) -> float:
    """The cycle in ms Horovod runs in this process after setup(..., cycle_ms), or in a child
    started with cycle_time_env(cycle_ms): the user's HOROVOD_CYCLE_TIME, else cycle_ms, else
    Horovod's default."""
    value = {**os.environ, **cycle_time_env(cycle_ms)}.get("HOROVOD_CYCLE_TIME")
    return float(value) if value else HOROVOD_DEFAULT_CYCLE_MS


@contextlib.contextmanager
def set_for_init(env: dict):
    """`env` in this process's environment while Horovod initialises (its background thread
    reads it before init returns), then taken out again: a process this one starts afterwards
    (a study's or a test's `horovodrun -np 2`) must not inherit a world of one. Under mpirun,
    inheriting HOROVOD_CONTROLLER=gloo made every rank of `-np 2` a lone process."""
    added = {k: v for k, v in env.items() if k not in os.environ}
    os.environ.update(added)
    try:
        yield
    finally:
        for key in added:
            os.environ.pop(key, None)


def setup(intra_op_threads: int = 0, cycle_ms: float = 0.0):
    """Initialise the process group and pin this process to its device and thread share.
    `cycle_ms`: Horovod's cycle time (config.horovod_cycle_ms; 0 = Horovod's default)."""
    # Horovod: the background thread reads its cycle time once, in init. Every cycle it syncs
    # its cache bits with all ranks, busy work that on a CPU host competes with training.
    os.environ.update(cycle_time_env(cycle_ms))
    # Horovod: a process no launcher started is a world of one, on Gloo even where MPI is built
    if hvd is not None:
        require_patched_horovod(tf.__version__)
    with set_for_init(controllers.lone_process_env(os.environ)):
        backend = Horovod() if hvd is not None else Single()
    if backend.rank() > 0:
        drop_start_up_noise()  # Horovod: rank 0 alone prints TensorFlow's start-up lines
    # Horovod: pin one GPU per local process (no-op on CPU-only hosts).
    # N processes on one host each get an equal share of its cores, not all of them.
    threads = intra_op_threads or max(1, (os.cpu_count() or 1) // backend.local_size())
    try:
        gpus = tf.config.list_physical_devices("GPU")
        for gpu in gpus:
            tf.config.experimental.set_memory_growth(gpu, True)
        if gpus:
            tf.config.set_visible_devices(gpus[backend.local_rank() % len(gpus)], "GPU")
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(max(1, min(2, threads)))
    except RuntimeError:
        # TensorFlow already ran in this process (a caller such as a notebook or a test used it
        # first): devices and threads can no longer change, so the run uses what is set.
        threads = tf.config.threading.get_intra_op_parallelism_threads() or threads
    return backend, threads
