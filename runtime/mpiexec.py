"""Finding and starting `mpiexec`.

Order: an explicit path, the `mpiexec` installed beside this interpreter (the
`mpich` wheel puts it in the venv's bin/), then PATH. Hydra (MPICH) runs as root
and oversubscribes cores without extra flags.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path


class LaunchError(RuntimeError):
    """The SPMD job could not be started or did not finish (message says why and how to fix)."""


def find_mpiexec(explicit: str | None = None) -> str:
    if explicit:
        path = shutil.which(explicit) or (explicit if Path(explicit).is_file() else None)
        if path is None:
            raise LaunchError(f"mpiexec '{explicit}' not found (given with --mpiexec)")
        return path
    beside = Path(sys.executable).with_name("mpiexec")
    if beside.is_file():
        return str(beside)
    found = shutil.which("mpiexec")
    if found is None:
        raise LaunchError("mpiexec not found next to the Python interpreter nor on PATH: `pip install mpich`, "
                          "or give its path with --mpiexec")
    return found


def run_spmd(ranks: int, argv: list[str], *, mpiexec: str | None = None, timeout: float | None = None,
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run `argv` (a command) on `ranks` MPI ranks; output is captured. Raises LaunchError on a timeout."""
    command = [find_mpiexec(mpiexec), "-n", str(ranks), *argv]
    environment = dict(os.environ, **(env or {}), PYTHONUNBUFFERED="1")
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=environment)
    except subprocess.TimeoutExpired as exc:
        raise LaunchError(f"the SPMD job on {ranks} ranks did not finish within {timeout} s: {' '.join(command)}") from None
