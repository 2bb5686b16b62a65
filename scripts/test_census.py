"""What a pytest run tested, for comparing two runs of the suite (docs/performance.md, "Tests").

    python scripts/test_census.py --junit junit.xml [--coverage .coverage] [--root .] [--top 30]

From pytest's JUnit XML: tests passed, failed, skipped and the seconds by file. From a coverage
data file of a run with `source = deepdensity, tests` (`make coverage`): the line coverage of
deepdensity/, and the distinct assertions the run executed: `assert` statements and
`pytest.raises`/`pytest.warns` blocks in tests/ whose line ran. A test module's assertion that
no test reached (a skipped or deleted test) is not counted, so two runs compare by what they
checked, not by what the files hold.
"""

import argparse
import ast
import collections
import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def junit_counts(path: Path) -> tuple:
    """({outcome: count}, {test file: seconds}, [(seconds, test id)]) from pytest's JUnit XML."""
    outcomes, by_file, tests = collections.Counter(), collections.Counter(), []
    for case in ET.parse(path).getroot().iter("testcase"):
        kinds = {child.tag for child in case}
        outcome = "failed" if kinds & {"failure", "error"} else "skipped" if "skipped" in kinds else "passed"
        outcomes[outcome] += 1
        seconds = float(case.get("time", 0))
        module = case.get("classname", "").replace(".", "/") + ".py"
        by_file[module] += seconds
        tests.append((seconds, f"{module}::{case.get('name')}"))
    return outcomes, by_file, sorted(tests, reverse=True)


def assertion_lines(source: str) -> set:
    """The first line of each assert statement and of each `with pytest.raises/warns(...)`."""
    lines = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assert):
            lines.add(node.lineno)
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                call = item.context_expr
                if (
                    isinstance(call, ast.Call)
                    and isinstance(call.func, ast.Attribute)
                    and call.func.attr in ("raises", "warns")
                ):
                    lines.add(node.lineno)
    return lines


def coverage_figures(data_file: Path, root: Path) -> tuple:
    """(line coverage of deepdensity/ in %, distinct executed assertions in tests/)."""
    import coverage

    data = coverage.CoverageData(basename=str(data_file))
    data.read()
    cov = coverage.Coverage(data_file=str(data_file), source=[str(root / "deepdensity")])
    cov.load()
    # every module of the package, those the run never imported at 0 %
    measured = sorted(str(p) for p in (root / "deepdensity").rglob("*.py"))
    statements = missing = 0
    for name in measured:
        _, stmts, _, miss, _ = cov.analysis2(name)
        statements, missing = statements + len(stmts), missing + len(miss)
    asserted = 0
    for name in data.measured_files():
        path = Path(name)
        if "/tests/" not in name or not path.exists():
            continue
        asserted += len(assertion_lines(path.read_text()) & set(data.lines(name) or ()))
    return 100.0 * (statements - missing) / max(statements, 1), asserted, len(measured)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--junit", type=Path, required=True, help="pytest --junitxml output")
    parser.add_argument("--coverage", type=Path, help="coverage data file (combined)")
    parser.add_argument("--root", type=Path, default=Path("."), help="the checkout the run tested")
    parser.add_argument("--top", type=int, default=30, help="files and tests listed by time")
    args = parser.parse_args(argv)
    outcomes, by_file, tests = junit_counts(args.junit)
    total = sum(by_file.values())
    print(
        f"tests: {sum(outcomes.values())} ({', '.join(f'{n} {k}' for k, n in sorted(outcomes.items()))}); "
        f"{total:.0f} s in tests"
    )
    if args.coverage:
        percent, asserted, files = coverage_figures(args.coverage, args.root.resolve())
        print(
            f"coverage of deepdensity/: {percent:.1f} % of the statements of its {files} modules; "
            f"distinct assertions executed: {asserted}"
        )
    print("\nslowest files (seconds, share):")
    for name, seconds in by_file.most_common(args.top):
        print(f"  {seconds:8.1f}  {100 * seconds / max(total, 1e-9):5.1f} %  {name}")
    print("\nslowest tests:")
    for seconds, name in tests[: args.top]:
        print(f"  {seconds:8.1f}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
