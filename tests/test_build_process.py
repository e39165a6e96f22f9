"""A build draws its charts in its own process as SVG text (render/svgplot.py): it forks
nothing, so nothing can outlive a killed build (issue 31, item 7: the chart painter process
it used to fork could), and it never imports matplotlib."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

BUILD = """
import multiprocessing, os, subprocess, sys
def refuse(*args, **kwargs):
    raise AssertionError("the build started a process")
os.fork = subprocess.Popen.__init__ = multiprocessing.Process.start = refuse
from rooflinec.cli.app import run
assert run(["build", *sys.argv[2:], "--out", sys.argv[1], "-q"]) == 0
plotting = sorted(m for m in sys.modules if m.split(".")[0] == "matplotlib")
assert not plotting, f"the build imported {plotting[:3]}"
"""


@pytest.mark.slow
def test_a_build_forks_nothing_and_imports_no_plotting_library(tmp_path):
    # qwen draws rooflines, the GEMM sweep and tokens/s; the others the catalog's roofline,
    # utilisation bars, a tp split and the scaling panels
    studies = ["specs/qwen.yaml", "specs/accelerators.yaml", "specs/published.yaml",
               "specs/llama70b-tp.yaml", "specs/scale.yaml"]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", BUILD, str(tmp_path), *studies], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(list(tmp_path.rglob("*.svg"))) >= 15
