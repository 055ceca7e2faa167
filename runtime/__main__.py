"""`python -m slicer.runtime ...`: slicer-run, or, when already inside an MPI job of several
ranks (`mpiexec -n 4 python -m slicer.runtime PROGRAM --mesh ...`), the same run in that job."""

import sys

from .cli import main

sys.exit(main())
