"""No two modules of the package share a file name, so a name in a traceback, a doc or a review says which
module it is (`runtime/collectives/plan_executor.py`, never a second `mpi_exec.py` beside `mpiexec.py`).

The one exception is deliberate: the two kernel generators (`lowering/contract/`, `lowering/rows/`) are split
the same way by concern (`analysis.py`, `emit.py`), so a reader who knows one knows where to look in the other.
"""

from collections import defaultdict

from package_tree import PACKAGE, package_files, relative

PARALLEL_GENERATORS = {"lowering/contract", "lowering/rows"}
"""Subpackages whose modules mirror each other's names on purpose."""
EXEMPT = {"__init__.py", "__main__.py"}


def test_no_two_modules_share_a_file_name():
    places = defaultdict(list)
    for path in package_files():
        if path.name in EXEMPT:
            continue
        where = relative(path.parent)
        places[path.name].append(where)
    clashes = {}
    for name, folders in places.items():
        outside = [f for f in folders if f not in PARALLEL_GENERATORS]
        if len(folders) > 1 and (len(outside) > 1 or (outside and len(folders) > len(outside))):
            clashes[name] = folders
    assert not clashes, "modules that share a file name (rename one; see docs/architecture.md):\n" + "\n".join(
        f"{name}: {', '.join(folders)}" for name, folders in sorted(clashes.items()))


def test_the_check_sees_the_parallel_generators():
    names = {(relative(p.parent), p.name) for p in package_files()}
    assert ("lowering/contract", "analysis.py") in names and ("lowering/rows", "analysis.py") in names
    assert PACKAGE.name == "slicer"
