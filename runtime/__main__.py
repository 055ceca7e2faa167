"""`python -m slicer.runtime ...`: slicer-run, or, when already inside an MPI job of several
ranks (`mpiexec -n 4 python -m slicer.runtime PROGRAM --mesh ...`), the same run in that job
(`slicer.runtime.jobs.in_job`, the path `Program.run_in_mpi` takes too).

An entry-point shim: the command-line tool lives in the tools layer (slicer.tools.slicer_run); this is the
one import from the runtime up to it, declared in pyproject.toml's import-linter contract."""

import sys

from slicer.tools.slicer_run import main

sys.exit(main())
