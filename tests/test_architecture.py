"""The package's shape, read from its source: one-way imports, no private names across
modules, Horovod in one module, the pure rules free of TensorFlow, and short functions.

Imports are read with `ast`, function-level ones included, so a cycle hidden inside a
function (the kind that works until someone moves an import to the top) still counts.
"""

import ast
import functools
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "deepdensity"
MAX_FUNCTION_LINES = 60
MAX_MODULE_LINES = 400
MAX_TRAINER_LINES = 250  # trainer.py reads as the steps of one run (issue 69); its pieces live beside it


@functools.lru_cache(maxsize=None)
def parsed(source: str) -> ast.AST:
    """A module's tree, parsed once for all the checks below (they only read it)."""
    return ast.parse(source)


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports_of(path: Path):
    """(imported module, [names]) for every import statement anywhere in the file."""
    for node in ast.walk(parsed(path.read_text())):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, []
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                raise AssertionError(f"{path}: relative import; the package uses absolute ones")
            names = [a.name for a in node.names]
            yield node.module, names


def internal_edges(name: str) -> set:
    """The package modules `name` imports (a `from pkg import mod` counts as pkg.mod)."""
    edges = set()
    for mod, names in imports_of(MODULES[name]):
        if not mod.startswith("deepdensity"):
            continue
        subs = {f"{mod}.{n}" for n in names if f"{mod}.{n}" in MODULES}
        edges |= subs or {mod}
    return edges - {name, "deepdensity"}


def find_cycle(graph: dict):
    state, stack = {}, []

    def visit(n):
        state[n] = "open"
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == "open":
                return stack[stack.index(m) :] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        stack.pop()
        state[n] = "done"
        return None

    for n in sorted(graph):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None


def test_the_cycle_finder_finds_a_cycle_and_accepts_a_tree():
    # the checker itself must be able to fail
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_no_import_cycle_even_through_function_level_imports():
    graph = {name: internal_edges(name) for name in MODULES}
    # the entry points (`__main__`, the cli table and the aliases) import everything by design,
    # and nothing imports them back, so they cannot close a cycle; they are in the graph anyway
    assert find_cycle(graph) is None


def test_no_module_imports_another_modules_private_names():
    offenders = []
    for name, path in MODULES.items():
        for mod, names in imports_of(path):
            if mod.startswith("deepdensity"):
                offenders += [f"{name} imports {mod}.{n}" for n in names if n.startswith("_")]
    assert offenders == []


def test_horovod_is_imported_in_one_module_only():
    importers = sorted(
        name for name, path in MODULES.items() if any(mod.split(".")[0] == "horovod" for mod, _ in imports_of(path))
    )
    assert importers == ["deepdensity.training.dist"]


HOROVOD_HANDLES = {"hvd", "hvd_tf"}  # training/dist.py's names for Horovod's modules


def horovod_handles(tree: ast.AST) -> list:
    """Line numbers where a module reaches Horovod's modules through dist.py's handles: `dist.hvd`,
    `from deepdensity.training.dist import hvd_tf`, `getattr(dist, "hvd")`, a bare `hvd`."""

    def reaches(node) -> bool:
        if isinstance(node, ast.Attribute):
            return node.attr in HOROVOD_HANDLES
        if isinstance(node, ast.Name):
            return node.id in HOROVOD_HANDLES
        if isinstance(node, ast.ImportFrom):
            return any(a.name in HOROVOD_HANDLES for a in node.names)
        return (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "getattr"
            and any(isinstance(a, ast.Constant) and a.value in HOROVOD_HANDLES for a in node.args)
        )

    return sorted({node.lineno for node in ast.walk(tree) if reaches(node)})


def test_the_horovod_handle_finder_finds_what_it_should():
    # the checker itself must be able to fail
    found = horovod_handles(
        ast.parse(
            "a = dist.hvd is None or dist.hvd.rank() == 0\n"
            "from deepdensity.training.dist import hvd_tf as h\n"
            'c = getattr(dist, "hvd")\nd = backend.rank()\ne = hvd.size()\n'
            "f = dist.setup()\n"
        )
    )
    assert found == [1, 2, 3, 5]


def test_nothing_outside_dist_touches_horovod():
    """Horovod is imported in dist.py and used there only: every other module goes through its
    backend (`dist.setup()`'s Single or Horovod), so that a run without Horovod, or another
    launcher, changes one module."""
    offenders = [
        f"{name}:{line}"
        for name, path in MODULES.items()
        if name != "deepdensity.training.dist"
        for line in horovod_handles(parsed(path.read_text()))
    ]
    assert offenders == []


STUDY = "deepdensity.study"
PURE = sorted(
    {
        "deepdensity.scaling.rules",
        "deepdensity.scaling.policies",
        "deepdensity.config",
        "deepdensity.training.runs",
        "deepdensity.study.judge.contrasts",
        "deepdensity.study.judge.contrasts",
        "deepdensity.study.judge.claims",
        "deepdensity.study.judge.beyond_verdicts",
        "deepdensity.study.record",
    }
    | {n for n in MODULES if n.startswith((f"{STUDY}.core.", f"{STUDY}.plan."))}
)


@pytest.mark.parametrize("pure", PURE)
def test_pure_modules_import_no_framework(pure):
    """The rules and the tables are tested exhaustively without starting TensorFlow, and the
    study driver reads run folders without it; check the closure of their imports."""
    seen, todo = set(), [pure]
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        for mod, _ in imports_of(MODULES[n]):
            assert mod.split(".")[0] not in ("tensorflow", "horovod", "keras"), f"{n} imports {mod}"
        todo += internal_edges(n)


FRAMEWORKS = ("tensorflow", "tf_keras", "keras", "horovod")


def function_level_imports(source: str) -> list:
    """(line, [modules], the comment on its line and those above it in its block of imports) of
    every import statement inside a function."""
    lines, found = source.splitlines(), []
    for fn in ast.walk(parsed(source)):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(fn):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                i = node.lineno - 1
                said = [lines[i].partition("#")[2]]
                # the comments above it, across the imports of its block (one reason for all)
                while i > 0 and (
                    lines[i - 1].strip().startswith(("#", "import ", "from ")) or not lines[i - 1].strip()
                ):
                    i -= 1
                    said.append(lines[i])
                mods = (
                    [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else [node.module] + [f"{node.module}.{a.name}" for a in node.names]
                )
                found.append((node.lineno, mods, " ".join(said)))
    return found


def module_level_imports(source: str) -> list:
    """The modules a source imports outside its functions (`from a import b` as a and a.b)."""
    tree = parsed(source)
    inside = {
        id(n) for fn in ast.walk(tree) if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) for n in ast.walk(fn)
    }
    return [
        m
        for node in ast.walk(tree)
        if id(node) not in inside
        for m in (
            [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            if isinstance(node, ast.ImportFrom)
            else []
        )
    ]


def frameworks_brought(sources: dict) -> set:
    """The modules of `sources` (name -> source) whose import, their packages' __init__ first,
    imports TensorFlow, Keras or Horovod through their module-level imports and theirs."""
    edges, direct = {}, set()
    for name, source in sources.items():
        imported = module_level_imports(source)
        direct |= {name} if any(m.split(".")[0] in FRAMEWORKS for m in imported) else set()
        parents = [".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)]
        ours = {m if m in sources else m.rpartition(".")[0] for m in imported if m.startswith("deepdensity")}
        edges[name] = {m for m in [*parents, *ours] if m in sources and m != name}
    brought, grown = set(direct), True
    while grown:  # to a fixed point: a module importing one that brings them
        more = {n for n, e in edges.items() if n not in brought and e & brought}
        brought, grown = brought | more, bool(more)
    return brought


def function_import_violations(sources: dict) -> list:
    """Function-level imports of the package's own modules that keep no framework out of their
    module, or do not say so (a comment naming TensorFlow on the line or right above it)."""
    bad, brought = [], frameworks_brought(sources)
    for name, source in sorted(sources.items()):
        for line, mods, said in function_level_imports(source):
            ours = sorted(
                {m if m in sources else m.rpartition(".")[0] for m in mods if m.startswith("deepdensity")}
                & set(sources),
                key=len,
                reverse=True,
            )
            if not ours:
                continue
            keeps_out = name not in brought and any(m in brought for m in ours)
            if not keeps_out or "TensorFlow" not in said:
                bad.append(
                    f"{name}:{line} imports {ours[0]} in a function "
                    + ("and says not why" if keeps_out else "though it keeps no TensorFlow out")
                )
    return bad


def test_the_function_import_checker_refuses_an_import_that_keeps_nothing_out_or_says_not_why():
    sources = {
        "deepdensity": "",
        "deepdensity.light": "import json\n",
        "deepdensity.heavy": "import tensorflow\n",
        "deepdensity.cli": "def main():\n    # TensorFlow: --help needs none\n    from deepdensity import heavy\n",
    }
    assert function_import_violations(sources) == []
    silent = {**sources, "deepdensity.cli": "def main():\n    from deepdensity import heavy\n"}
    assert function_import_violations(silent) == [
        "deepdensity.cli:2 imports deepdensity.heavy in a function and says not why"
    ]
    light = {**sources, "deepdensity.cli": "def main():\n    from deepdensity.light import json  # TensorFlow\n"}
    assert function_import_violations(light) == [
        "deepdensity.cli:2 imports deepdensity.light in a function though it keeps no TensorFlow out"
    ]
    heavy_already = {
        **sources,
        "deepdensity.cli": "import tensorflow\n\n\ndef main():\n    from deepdensity import heavy  # TensorFlow\n",
    }
    assert function_import_violations(heavy_already) != []


def test_a_function_level_import_only_keeps_tensorflow_out_of_a_command_and_says_so():
    """A module imports at its top, where a reader looks; inside a function only what would bring
    TensorFlow (Keras, Horovod) into a command that does not need it, with that reason beside it."""
    assert function_import_violations({name: path.read_text() for name, path in MODULES.items()}) == []


def test_no_function_is_longer_than_sixty_lines():
    long = []
    for name, path in MODULES.items():
        for node in ast.walk(parsed(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long.append(f"{name}.{node.name}: {n} lines")
    assert long == []


def test_no_module_is_longer_than_four_hundred_lines():
    """A module a reader can hold: past 400 lines one has always held more than one concern
    (issue 44). The rendering kernel is C++ and not counted."""
    long = [
        f"{name}: {n} lines"
        for name, path in MODULES.items()
        if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    ]
    assert long == []


def test_the_trainer_reads_as_the_steps_of_one_run_in_at_most_250_lines():
    n = len(MODULES["deepdensity.training.trainer"].read_text().splitlines())
    assert n <= MAX_TRAINER_LINES, f"training/trainer.py: {n} lines"


REGISTRY = "deepdensity.scaling.policies"
POLICY_NAMES = {"strong", "weak", "linear", "warmup", "adaptive", "local"}


def mode_comparisons(tree: ast.AST) -> list:
    """Line numbers of comparisons that interpret a policy by its name: `x == "warmup"`,
    `m in ("adaptive", "local")`, `mode in rules.BEYOND_MODES` and the like. Selecting the
    cells of a mode held in a variable (`c.mode == mode`) is not interpreting it."""

    def names_a_policy(node) -> bool:
        if isinstance(node, ast.Constant):
            return node.value in POLICY_NAMES
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return any(names_a_policy(e) for e in node.elts)
        name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
        return name.endswith("_MODES")

    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Compare) and any(names_a_policy(x) for x in [node.left, *node.comparators])
    ]


def test_the_mode_comparison_finder_finds_what_it_should():
    # the checker itself must be able to fail
    found = mode_comparisons(
        ast.parse(
            'a = p.mode == "warmup"\nb = m in ("adaptive", "local")\n'
            "c = mode not in rules.BEYOND_MODES\nd = c.mode == mode\n"
            'e = key == ("strong",)\n'
        )
    )
    assert found == [1, 2, 3, 5]


def test_no_module_but_the_registry_interprets_a_policy_by_its_name():
    """What a policy is (batch, lr, warmup, callbacks, support, naming) is asked of its object
    in scaling/policies.py; a comparison with a policy's name elsewhere is a policy decided
    outside it, the habit that made a new policy touch ten files."""
    offenders = [
        f"{name}:{line}"
        for name, path in MODULES.items()
        if name != REGISTRY
        for line in mode_comparisons(parsed(path.read_text()))
    ]
    assert offenders == []


# "local" is also the name of the study's executor that trains here (--executor local)
EXECUTOR_LOCAL = {
    ("deepdensity.study.plan.study_plan", "local"),
    ("deepdensity.study.repro", "local"),
    ("deepdensity.study.run.slurm_runner", "local"),
    ("deepdensity.launch.slurm_jobs", "local"),
}


def policy_name_literals(tree: ast.AST) -> list:
    """(line, text) of every string literal in code that names a policy: the name itself, or a
    run-name prefix built on one ("warmup-"). Text inside f-strings is prose, not a name."""
    prose = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in ast.walk(n)}
    return [
        (n.lineno, n.value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant)
        and isinstance(n.value, str)
        and id(n) not in prose
        and (n.value in POLICY_NAMES or any(n.value.startswith(p + "-") for p in POLICY_NAMES))
    ]


def test_the_policy_name_finder_finds_what_it_should():
    found = policy_name_literals(
        ast.parse(
            'a = ("weak", "linear")\nb = name.startswith("warmup-")\n'
            'c = f"strong {x}"\nd = policies.STRONG\ne = "strong scaling"\n'
        )
    )
    assert found == [(1, "weak"), (1, "linear"), (2, "warmup-")]


def test_the_study_names_policies_only_through_the_registry():
    """A policy named by a literal in the study (a tuple of modes, a name prefix) is a list that a
    new policy silently misses; the study names one through scaling/policies.py's constants or
    asks the registry (policies.paper(), policies.beyond(), ...)."""
    offenders = [
        f"{name}:{line} {text!r}"
        for name, path in MODULES.items()
        if name.startswith("deepdensity.study")
        for line, text in policy_name_literals(parsed(path.read_text()))
        if (name, text) not in EXECUTOR_LOCAL
    ]
    assert offenders == []


# The study's stages (issue 56), in the order a study goes through them: what a stage may import.
# core (types and models) < plan < record < judge < report is one chain; run (the runners, the
# clock's measurement, the checks that train) stands beside it, after the record, and no stage of
# the chain imports it: a report is a function of its record, never of the machinery that ran it.
# The modules at the top of deepdensity/study (repro, kinds, rerender, ledger_import) wire the
# stages together and may import any; no stage imports them.
CHAIN = ("core", "plan", "record", "judge", "report")
MAY_IMPORT = {**{s: set(CHAIN[: i + 1]) for i, s in enumerate(CHAIN)}, "run": {"core", "plan", "record", "run"}}


def study_stage(module: str):
    """The stage of a module of deepdensity/study (its sub-package, or `record`), "top" for the
    wiring modules, None outside the study."""
    parts = module.split(".")
    if parts[:2] != ["deepdensity", "study"] or len(parts) < 3:
        return None
    return parts[2] if parts[2] in MAY_IMPORT else "top"


def stage_violations(graph: dict) -> list:
    """`importer (stage) imports imported (stage)` for every arrow the stage order forbids."""
    return [
        f"{a} ({study_stage(a)}) imports {b} ({study_stage(b)})"
        for a in sorted(graph)
        if study_stage(a) not in (None, "top")
        for b in sorted(graph[a])
        if study_stage(b) and study_stage(b) not in MAY_IMPORT[study_stage(a)]
    ]


def test_the_stage_checker_refuses_a_report_that_imports_the_runner():
    # the checker itself must be able to fail: the arrows the order forbids, and none it allows
    graph = {
        f"{STUDY}.report.figures": {f"{STUDY}.run.runner", f"{STUDY}.judge.claims", f"{STUDY}.record"},
        f"{STUDY}.core.cells": {f"{STUDY}.plan.seeding"},
        f"{STUDY}.judge.claims": {f"{STUDY}.repro"},
        f"{STUDY}.run.runner": {f"{STUDY}.record", f"{STUDY}.core.ledger"},
        f"{STUDY}.repro": {f"{STUDY}.run.runner"},
    }
    assert stage_violations(graph) == [
        f"{STUDY}.core.cells (core) imports {STUDY}.plan.seeding (plan)",
        f"{STUDY}.judge.claims (judge) imports {STUDY}.repro (top)",
        f"{STUDY}.report.figures (report) imports {STUDY}.run.runner (run)",
    ]


def test_the_study_is_in_stages_and_each_imports_only_earlier_ones():
    stages = {study_stage(n) for n in MODULES if n.startswith(STUDY + ".")}
    assert stages == set(MAY_IMPORT) | {"top"}
    assert stage_violations({name: internal_edges(name) for name in MODULES}) == []


# The package's floors, lowest first: a module imports only from its own floor or lower ones, so
# that each floor can be read, tested and reused without those above it. launch/ sits under
# training/ (a training process uses its controllers, hosts and signals; a launcher never imports
# what trains), and the study above everything it runs and reports.
FLOORS = [
    {"utils"},
    {"scaling"},
    {"config"},
    {"model", "data"},
    {"launch"},
    {"training"},
    {"perf"},
    {"tools"},
    {"study"},
    {"top"},
]


def floor_of(module: str) -> int:
    """The floor of a package module (config.py is a floor of its own); the other top-level
    modules (the package's __init__, the CLI, the command aliases) are the top floor."""
    parts = module.split(".")
    package = parts[1] if len(parts) > 1 and any(parts[1] in f for f in FLOORS) else "top"
    return next(i for i, f in enumerate(FLOORS) if package in f)


def floor_violations(graph: dict) -> list:
    return [
        f"{a} (floor {floor_of(a)}) imports {b} (floor {floor_of(b)})"
        for a in sorted(graph)
        for b in sorted(graph[a])
        if floor_of(b) > floor_of(a)
    ]


def test_the_floor_checker_refuses_an_import_from_a_higher_floor():
    # the checker itself must be able to fail: training reaching up into the study, and launch
    # reaching up into training, are the two arrows the floors exist to forbid
    assert floor_violations({"deepdensity.training.trainer": {"deepdensity.study.core.curves"}}) != []
    assert floor_violations({"deepdensity.launch.relay": {"deepdensity.training.interrupts"}}) != []
    assert floor_violations({"deepdensity.training.dist": {"deepdensity.launch.hosts"}}) == []
    assert floor_of("deepdensity.cli") == floor_of("deepdensity") == len(FLOORS) - 1


def test_every_package_has_a_floor_and_no_module_imports_from_a_higher_one():
    packages = {n.split(".")[1] for n in MODULES if n.count(".") >= 2}
    assert packages <= set().union(*FLOORS), f"a package without a floor: {packages - set().union(*FLOORS)}"
    assert floor_violations({name: internal_edges(name) for name in MODULES}) == []
