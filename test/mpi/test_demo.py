"""`make demo` runs examples/demo.py: it must finish, check every result, and report the realistic-size MLP
on 1 and 2 ranks (issue 14). Run as the Makefile runs it, in a fresh interpreter."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DEMO = Path(__file__).resolve().parents[2] / "examples" / "demo.py"


@pytest.mark.slow
def test_the_demo_runs_and_checks_every_result():
    done = subprocess.run([sys.executable, str(DEMO)], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONUNBUFFERED="1"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert out.count("results match the unpartitioned program") == 2
    ranks = [1, 2] if (os.cpu_count() or 1) >= 2 else [1]
    for n in ranks:
        assert re.search(rf"  {n} rank\(s\): +[0-9.]+ ms per run .*matches numpy", out), out[-2000:]
    assert "MISMATCH" not in out
