"""The pipeline runs one way: the render stage lays out what the analyses computed and
imports nothing that lowers, rewrites or evaluates programs."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "rooflinec"
RENDER_STAGE = ("render.py", "chartdata.py", "charts.py", "mathml.py", "quantities.py")
COMPUTING = {"ir", "evaluate", "lower", "passes", "flash", "workbench", "sweep", "derive",
             "efficiency", "analyses", "ops", "params", "custom", "lower_custom", "chartpoints"}


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("rooflinec"):
            names.add(node.module.split(".")[1] if "." in node.module else "")
            if node.module == "rooflinec":
                names.update(a.name for a in node.names)
        elif isinstance(node, ast.Import):
            names.update(a.name.split(".")[1] for a in node.names
                         if a.name.startswith("rooflinec."))
    return names


@pytest.mark.parametrize("module", RENDER_STAGE)
def test_render_stage_imports_no_computing_module(module):
    assert _imports(PACKAGE / module) & COMPUTING == set()


def test_the_check_sees_imports():
    assert "workbench" in _imports(PACKAGE / "analyses" / "__init__.py")


def test_chartdata_reads_heights_it_does_not_compute():
    """Where a point sits is computed with the analyses (chartpoints); the chart data only
    reads it: its source holds no peak, bandwidth or min()."""
    source = (PACKAGE / "chartdata.py").read_text(encoding="utf-8")
    assert "min(" not in source and "bandwidth\"]" not in source and "_peak" not in source
