"""One helper per job: the jobs written several times before (issue 47) have one home each, and no other
module of the package does them again.

- an `ir.Operation` from a view (`isinstance(x, ir.OpView)`): `core/operations.py` (`as_op`);
- a walk over nested ops (`op.walk(...)`): `core/operations.py` (`walk_ops`, `nested_ops`), but for the two walks
  listed in `OTHER_WALKS`, which do another job;
- the host's CPU (`/proc/cpuinfo`, `os.sched_getaffinity`, `os.cpu_count`): `core/host.py`;
- the partitioner's `shard.grid`s (comparing an op's name with `names.GRID`): `dialect/ops.py` (`grids`), and the
  two modules that make them (`spmd/partitioner.py`, `spmd/emit_collectives.py`).
"""

import ast

from package_tree import package_files, parsed, relative, string_literals

OTHER_WALKS = {
    "propagation/ir_utils.py": "walk_captured stops early (SKIP, INTERRUPT) at the first captured value",
    "lowering/rows/emit.py": "_blocks collects blocks in post-order; that order names the generated functions",
}
HOMES = {
    "OpView": {"core/operations.py"},
    "walk": {"core/operations.py", *OTHER_WALKS},
    "cpu": {"core/host.py"},
    "GRID": {"dialect/ops.py", "spmd/partitioner.py", "spmd/emit_collectives.py"},
}


def _jobs(tree: ast.AST):
    """(job, line) for each place in `tree` that does one of the jobs above."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance" \
                and any(isinstance(n, ast.Attribute) and n.attr == "OpView" for n in ast.walk(node.args[1])):
            yield "OpView", node.lineno
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "walk" \
                and node.args and not isinstance(node.args[0], ast.Constant):
            yield "walk", node.lineno
        if isinstance(node, ast.Attribute) and node.attr in ("sched_getaffinity", "cpu_count"):
            yield "cpu", node.lineno
        if isinstance(node, ast.Name) and node.id == "GRID" and isinstance(node.ctx, ast.Load):
            yield "GRID", node.lineno
    for node, text in string_literals(tree):
        if "/proc/cpuinfo" in text:
            yield "cpu", node.lineno


def test_each_job_is_done_in_its_home():
    found = [f"{relative(path)}:{line}: {job} (belongs in {', '.join(sorted(HOMES[job]))})"
             for path in package_files() for job, line in _jobs(parsed(path)) if relative(path) not in HOMES[job]]
    assert not found, "use the one helper for the job:\n" + "\n".join(found)


def test_the_check_finds_each_job():
    tree = ast.parse('import os\nisinstance(x, ir.OpView)\nop.walk(visit)\nos.cpu_count()\nn == GRID\n'
                     'open("/proc/cpuinfo")\n')
    assert sorted(_jobs(tree)) == [("GRID", 5), ("OpView", 2), ("cpu", 4), ("cpu", 6), ("walk", 3)]
