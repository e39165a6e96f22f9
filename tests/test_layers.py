"""The pipeline runs one way. The layer contract in pyproject.toml ([tool.importlinter]) says
which stage may import which: cli > analyses | serving | measure > render > cost > spec >
model > base, and the render stage imports nothing that lowers, rewrites or evaluates. Here
it runs with the suite (so in CI), beside a check that the import graph has no cycle and that
imports sit at the top of modules."""

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "rooflinec"
# imported inside functions on purpose, each with its reason beside it: optional extras
# (torch, transformers, ijson), matplotlib (the plan and validation charts), POSIX fcntl
LAZY = {"torch", "transformers", "ijson", "matplotlib", "fcntl"}


def _lint(cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "from importlinter.cli import lint_imports_command;"
                           "lint_imports_command()"], cwd=cwd, capture_output=True, text=True,
                          env={"PYTHONPATH": str(cwd), "PATH": ""}, timeout=300)


@pytest.mark.slow
def test_the_layer_contract_is_kept():
    done = _lint(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 kept, 0 broken" in done.stdout


@pytest.mark.slow
def test_the_contract_check_fails_on_an_upward_import(tmp_path):
    """The same command on a two-layer toy package whose lower layer imports the higher."""
    pkg = tmp_path / "toy"
    (pkg / "high").mkdir(parents=True)
    (pkg / "low").mkdir()
    for init in ("__init__.py", "high/__init__.py", "low/__init__.py"):
        (pkg / init).write_text("")
    (pkg / "high" / "a.py").write_text("X = 1\n")
    (pkg / "low" / "b.py").write_text("from toy.high.a import X\n")
    (tmp_path / "pyproject.toml").write_text(textwrap.dedent("""\
        [tool.importlinter]
        root_package = "toy"
        [[tool.importlinter.contracts]]
        name = "toy layers"
        type = "layers"
        layers = ["toy.high", "toy.low"]
        """))
    done = _lint(tmp_path)
    assert done.returncode != 0 and "BROKEN" in done.stdout, done.stdout + done.stderr
    assert "toy.low.b -> toy.high.a" in done.stdout


def _cycles(graph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    for start in sorted(graph.modules):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.find_modules_directly_imported_by(start))))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                elif child in on:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def test_the_import_graph_has_no_cycle():
    sys.path.insert(0, str(ROOT))
    try:
        graph = grimp.build_graph("rooflinec", cache_dir=None)
    finally:
        sys.path.remove(str(ROOT))
    assert len(graph.modules) > 50, "the graph should hold every module"
    assert _cycles(graph) == []


def test_the_cycle_check_sees_a_cycle():
    class Toy:
        modules = {"a", "b", "c"}
        edges = {"a": {"b"}, "b": {"a"}, "c": {"a"}}

        def find_modules_directly_imported_by(self, m):
            return self.edges[m]
    assert _cycles(Toy()) == [["a", "b"]]


def _function_imports(path: Path, root: Path = ROOT) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in top:
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            found += [f"{path.relative_to(root)}:{node.lineno}: {n}" for n in names
                      if n.split(".")[0] not in LAZY]
    return found


@pytest.mark.slow
def test_imports_sit_at_the_top_of_modules():
    inside = [line for path in sorted(PACKAGE.rglob("*.py")) for line in _function_imports(path)]
    assert inside == [], "move these imports to the module's top (or say why they are lazy)"


def test_the_top_of_module_check_sees_a_function_import(tmp_path):
    (tmp_path / "m.py").write_text("import os\n\ndef f():\n    from rooflinec.cost import workbench\n"
                                   "    import torch\n")
    assert _function_imports(tmp_path / "m.py", tmp_path) == ["m.py:4: rooflinec.cost"]


def test_chartdata_reads_heights_it_does_not_compute():
    """Where a point sits is computed with the analyses (chartpoints); the chart data only
    reads it: its source holds no peak, bandwidth or min()."""
    source = (PACKAGE / "render" / "chartdata.py").read_text(encoding="utf-8")
    assert "min(" not in source and "bandwidth\"]" not in source and "_peak" not in source
