"""`--out` of import, calibrate and measure device names a file: a regular file or a new
path is written; a folder, FIFO, device node, socket or broken link is a usage error before
any work, and is left as it was (issue 31, item 2). Device nodes are covered by the same
stat test as FIFOs; /dev itself is never touched."""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path

import pytest

from rooflinec.cli.app import run

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fuzz_inputs  # noqa: E402 - a sibling module of the tests, not a package


@pytest.mark.parametrize("kind", fuzz_inputs.TARGETS)
@pytest.mark.parametrize("command", fuzz_inputs.COMMANDS)
def test_out_is_a_regular_file_or_a_new_path(tmp_path, command, kind):
    fuzz_inputs.check_out((command, kind), tmp_path)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_out_is_refused_before_the_config_is_read(tmp_path):
    """The config does not exist: the --out mistake is said first, as a usage error."""
    fifo = tmp_path / "spec.yaml"
    os.mkfifo(fifo)
    out, err = io.StringIO(), io.StringIO()
    assert run(["import", str(tmp_path / "absent.json"), "--out", str(fifo)], out, err) == 2
    assert err.getvalue().startswith("usage: rooflinec import")
    assert f"--out: {fifo} is a FIFO (named pipe)" in err.getvalue()
    assert os.path.exists(fifo) and not os.path.isfile(fifo)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_calibrate_through_the_simulator_refuses_a_fifo_out_too(tmp_path):
    """`calibrate --simulate` takes the same --out check, before the CSV is read."""
    fifo = tmp_path / "cal.yaml"
    os.mkfifo(fifo)
    out, err = io.StringIO(), io.StringIO()
    assert run(["calibrate", "--simulate", str(tmp_path / "absent.csv"), "--out", str(fifo)], out, err) == 2
    assert f"--out: {fifo} is a FIFO (named pipe)" in err.getvalue()
    assert os.path.exists(fifo) and not os.path.isfile(fifo)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_write_file_itself_never_renames_over_a_fifo(tmp_path):
    """The last line of defence, for a path that became special after the command checked it."""
    from rooflinec.base.errors import RooflineError
    from rooflinec.cli.output import write_file
    fifo = tmp_path / "x.yaml"
    os.mkfifo(fifo)
    with pytest.raises(RooflineError, match="a FIFO"):
        write_file(str(fifo), "text\n")
    assert not os.path.isfile(fifo) and os.listdir(tmp_path) == ["x.yaml"]
