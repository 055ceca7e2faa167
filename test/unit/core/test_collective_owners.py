"""One owner per collective (docs/architecture.md, "A new collective"): each kind is one class, and what needs IR
or MPI is a table keyed by the class (`spmd.emit_collectives.EMISSIONS`,
`runtime.collectives.collective_kinds.EXECUTIONS`).
Checked two ways: the package branches on the kind of a collective (isinstance on a step class, comparisons with
a kind's class, op name or IR op name) outside the collectives' own modules in at most `MAX_BRANCHING_FILES`
files; and a kind the package does not have, registered in one place (extra_collective.py), goes through
emission, the kernel graph, the simulator, the report and the pictures with no other edit (its MPI and
shared-memory runs: test/mpi/test_extra_collective_mpi.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
from extra_collective import OP_NAME, GatherSum, registered
from mlir import ir
from package_tree import PACKAGE, package_files, parsed, relative

import slicer
from slicer.core import names
from slicer.dialect import make_context
from slicer.lowering import CollectiveNode, KernelGraph, build_kernel_graph
from slicer.redistribution import STEP_TYPES, Plan, type_before
from slicer.redistribution.collective import STEP_OF_IR
from slicer.runtime.simulation.simulator import Simulator
from slicer.spmd.emit_collectives import PlanEmitter
from slicer.spmd.report import report
from slicer.viz import memory_report, value_picture

#: The collectives' own modules: their classes and registry, the views of their IR ops. (The tables keyed by class,
#: `runtime/collectives/collective_kinds.py` and `spmd/emit_collectives.py`, need no branch either.)
OWN = {"redistribution/steps.py", "redistribution/collective.py", "dialect/collectives.py"}
#: Passes written for particular kinds (bucketing combines all-reduces and reduce-scatters; chunked contractions
#: split the contraction feeding one) may name them; nothing that dispatches on the kind may.
MAX_BRANCHING_FILES = 2
EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def _kind_names() -> set[str]:
    """The names a branch on the kind compares with: the classes, the op names ('all_gather') and the IR op
    names' constants in `core.names` (ALL_GATHER, ...)."""
    classes = {cls.__name__ for cls in STEP_TYPES.values()}
    ops = {"'" + op for op in STEP_TYPES}
    ir_constants = {name for name, value in vars(names).items() if isinstance(value, str) and value in STEP_OF_IR}
    return classes | ops | ir_constants


def _named(node: ast.AST):
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        for element in node.elts:
            yield from _named(element)
    elif isinstance(node, ast.Name):
        yield node.id
    elif isinstance(node, ast.Attribute):
        yield node.attr
    elif isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield "'" + node.value


def kind_branches(tree: ast.AST, kinds: set[str]) -> list[int]:
    """Lines of `tree` that branch on the kind: isinstance/issubclass with a step class, a comparison (==, is,
    in, ...) with a class, an op name or an IR op name, a class pattern of a match."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("isinstance", "issubclass") \
                and len(node.args) == 2:
            hit = any(n in kinds for n in _named(node.args[1]))
        elif isinstance(node, ast.Compare):
            hit = any(n in kinds for side in (node.left, *node.comparators) for n in _named(side))
        elif isinstance(node, ast.MatchClass):
            hit = any(n in kinds for n in _named(node.cls))
        else:
            continue
        if hit:
            lines.append(node.lineno)
    return lines


def test_the_kind_of_a_collective_is_branched_on_in_at_most_two_files_outside_its_owners():
    kinds = _kind_names()
    assert {"AllGather", "'all_gather", "ALL_GATHER", "PERMUTE"} <= kinds
    branching = {}
    for path in package_files():
        name = relative(path)
        lines = kind_branches(parsed(path), kinds)
        if lines and name not in OWN:
            branching[name] = lines
    assert len(branching) <= MAX_BRANCHING_FILES, (
        f"{len(branching)} files branch on the kind of a collective (ask the class, or key a table by it: "
        f"docs/architecture.md, 'A new collective'): {branching}")


def test_the_counter_sees_the_branches_it_counts():
    kinds = _kind_names()
    source = ("if isinstance(s, (AllGather, Foo)): pass\nif s.op == 'permute': pass\n"
              "if op.name in (ALL_REDUCE, X): pass\nif type(s) is Permute: pass\nif s.local: pass\n")
    assert kind_branches(ast.parse(source), kinds) == [1, 2, 3, 4]
    assert (PACKAGE / "redistribution" / "steps.py").exists()


def _row_sums_with(kind) -> tuple[slicer.Program, str]:
    """The row sums of examples/reduction.mlir with the reduced dim tiled over x=2, and its SPMD module with the
    all_reduce of the partial sums replaced by a step of `kind`, emitted by the package's emitter."""
    prog = slicer.compile((EXAMPLES / "reduction.mlir").read_text(), mesh=slicer.Mesh(x=2),
                          tactics=slicer.parse_tactics("arg0.1=x"))
    [node] = [n for n in prog.graph.nodes if isinstance(n, CollectiveNode)]
    after = node.step.type_after
    before = type_before(node.step, after, prog.mesh)
    plan = Plan(prog.mesh, before, after, (kind(node.step.mesh_axes, after),))
    with make_context(), ir.Location.unknown():
        module = ir.Module.parse(str(prog.spmd))
        [func] = [op for op in module.body.operations if op.operation.name == "func.func"]
        [old] = [op for op in func.regions[0].blocks[0].operations if op.operation.name == node.step.ir_name]
        with ir.InsertionPoint(old):
            new = PlanEmitter(prog.mesh, "mesh", lambda: []).emit(old.operands[0], plan, lambda step: old.location)
        old.results[0].replace_all_uses_with(new)
        old.operation.erase()
        module.operation.verify()
        return prog, str(module)


def test_a_new_kind_registered_in_one_place_runs_through_the_compiler():
    with registered() as kind:
        prog, spmd = _row_sums_with(kind)
        assert OP_NAME in spmd and "shard.all_reduce" not in spmd  # emitted as its own op
        graph = build_kernel_graph(spmd)
        [node] = [n for n in graph.nodes if isinstance(n, CollectiveNode)]
        assert type(node.step) is GatherSum and node.op == "gather_sum"  # read back by the kernel graph
        assert KernelGraph.from_json(graph.to_json()).nodes[-1].step == node.step  # what the ranks load
        a = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)
        ours, theirs = Simulator(graph)(a), Simulator(prog.graph)(a)
        np.testing.assert_array_equal(ours, theirs)  # the same sums in the same order as the all_reduce
        np.testing.assert_allclose(ours, a.astype(np.float64).sum(axis=1), rtol=1e-5)

        [entry] = report(ir.Module.parse(spmd, make_context())).collectives
        assert entry.op == OP_NAME and entry.mesh_axes == ("x",)
        assert entry.bytes_received_per_device == 4 * 8  # the other member's 8 partial sums (f32)

        text = memory_report(graph).text()
        assert "gather_sum" in text and "+64 B scratch" in text  # its MPI receive buffer: 2 blocks of 8 f32
        picture = value_picture(graph, node.input).text()
        assert "partial" in picture  # its global type before, from the class's inverted rule
    assert "gather_sum" not in STEP_TYPES
