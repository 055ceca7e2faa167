"""Settings shared by every pytest test.

The MPI tests run 4- and 8-rank jobs on small CI machines (2 cores): they oversubscribe on purpose, so the
launcher's refusal of more ranks than cores (`slicer.runtime.resources.check_ranks`) is lifted here. The
refusal itself is tested with the variable removed. Plans use the built-in cost figures, not the ones a
`slicer-plan --calibrate` run may have stored on this machine.
"""

import os

os.environ.setdefault("SLICER_OVERSUBSCRIBE", "1")
# Plans must not depend on this machine's `slicer-plan --calibrate` figures (redistribution.costs).
os.environ.setdefault("SLICER_COST_MODEL", "builtin")
