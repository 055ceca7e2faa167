"""Propagation and partitioning scale linearly with the program (docs/propagation.md, "Cost").

Programs: a chain of L identical residual blocks, x = x + relu(x @ w1_i) @ w2_i, where every block's input is
read by two consumers (its matmul and the residual add): the class that once made data parallelism copy each
block's producers into every consumer, doubling the program at each block. For each strategy (data parallel,
Megatron, both on a 2x2 mesh):
- the partitioned program's linalg ops and collectives are exactly linear in L (equal increments from L = 1 to
  2, 4 and 8), and about as many as the global program's;
- the number of rewrites is linear in L, and the L = 8 partition takes at most 10x the L = 1 one (CPU time;
  linear would be 8x);
- the partitioned program equals the global one (in-process simulator, numpy reference).
And the budget: a law that keeps rewriting stops at a budget proportional to the program, with an error naming
the law and a reproducer that `slicer-opt` reads."""

import re
import time

import numpy as np
import pytest
from mlir import ir

import slicer
from slicer.core.errors import BudgetExceeded
from slicer.dialect import make_context, walk_ops
from slicer.propagation import engine
from slicer.propagation.engine import PropagationError, propagate_module

ROWS, MODEL, HIDDEN = 8, 8, 16
STRATEGIES = {
    "data": lambda depth: ("arg0.0=x", {"x": 2}),
    "megatron": lambda depth: (";".join(f"arg{1 + 2 * i}.1=y;arg{2 + 2 * i}.0=y" for i in range(depth)), {"y": 2}),
    "data_megatron": lambda depth: ("arg0.0=x;" + ";".join(f"arg{1 + 2 * i}.1=y;arg{2 + 2 * i}.0=y"
                                                          for i in range(depth)), {"x": 2, "y": 2}),
}


def residual_chain(depth: int) -> str:
    """`depth` residual MLP blocks on x: [ROWS, MODEL], weights w1_i: [MODEL, HIDDEN], w2_i: [HIDDEN, MODEL]."""
    x_t, h_t = f"tensor<{ROWS}x{MODEL}xf32>", f"tensor<{ROWS}x{HIDDEN}xf32>"
    args = [f"%x: {x_t}"] + [a for i in range(depth) for a in (f"%w1_{i}: tensor<{MODEL}x{HIDDEN}xf32>",
                                                                f"%w2_{i}: tensor<{HIDDEN}x{MODEL}xf32>")]
    lines = [f"func.func @chain({', '.join(args)}) -> {x_t} {{",
             "  %zero = arith.constant 0.0 : f32",
             f"  %eh = tensor.empty() : {h_t}", f"  %ex = tensor.empty() : {x_t}",
             f"  %fh = linalg.fill ins(%zero : f32) outs(%eh : {h_t}) -> {h_t}",
             f"  %fx = linalg.fill ins(%zero : f32) outs(%ex : {x_t}) -> {x_t}"]
    x = "%x"
    for i in range(depth):
        lines += [
            f"  %h{i} = linalg.matmul ins({x}, %w1_{i} : {x_t}, tensor<{MODEL}x{HIDDEN}xf32>) outs(%fh : "
            f"{h_t}) -> {h_t}",
            f"  %a{i} = linalg.max ins(%h{i}, %fh : {h_t}, {h_t}) outs(%eh : {h_t}) -> {h_t}",
            f"  %o{i} = linalg.matmul ins(%a{i}, %w2_{i} : {h_t}, tensor<{HIDDEN}x{MODEL}xf32>) outs(%fx : "
            f"{x_t}) -> {x_t}",
            f"  %r{i} = linalg.add ins({x}, %o{i} : {x_t}, {x_t}) outs(%ex : {x_t}) -> {x_t}",
        ]
        x = f"%r{i}"
    lines += [f"  return {x} : {x_t}", "}"]
    return "\n".join(lines)


def reference(arrays) -> np.ndarray:
    x = arrays[0].astype(np.float64)
    for w1, w2 in zip(arrays[1::2], arrays[2::2]):
        x = x + np.maximum(x @ w1, 0.0) @ w2
    return x


def counts(text: str) -> tuple[int, int]:
    """(linalg ops, collectives) of a program's text."""
    names = re.findall(r"^\s*(?:%[^=]+=\s*)?\"?([a-z_]+\.[a-z_.]+)", text, re.M)
    linalg = sum(1 for n in names if n.startswith("linalg.") and n not in ("linalg.yield", "linalg.index"))
    collectives = sum(1 for n in names if n.startswith("shard.") and n not in ("shard.grid",
                                                                               "shard.process_multi_index"))
    return linalg, collectives


def rewrites(text: str, tactics: str, mesh) -> int:
    journals = []
    original = engine.propagate

    def counting(function, **options):
        journal, conflicts = original(function, **options)
        journals.append(journal.rewrites)
        return journal, conflicts

    with make_context():
        module = slicer.apply_tactics(ir.Module.parse(text), slicer.parse_tactics(tactics), mesh=mesh)
        engine.propagate, saved = counting, engine.propagate
        try:
            propagate_module(module.operation)
        finally:
            engine.propagate = saved
    return sum(journals)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.slow
def test_partitioned_program_grows_exactly_linearly(strategy):
    sizes = {}
    for depth in (1, 2, 4, 8):
        tactics, mesh = STRATEGIES[strategy](depth)
        text = residual_chain(depth)
        prog = slicer.compile(text, mesh=mesh, tactics=slicer.parse_tactics(tactics))
        sizes[depth] = counts(prog.spmd)
        global_linalg = counts(text)[0]
        assert sizes[depth][0] <= 1.2 * global_linalg, (depth, sizes[depth], global_linalg)
    step = tuple(b - a for a, b in zip(sizes[1], sizes[2]))
    for depth in (4, 8):
        assert sizes[depth] == tuple(s + d * (depth - 1) for s, d in zip(sizes[1], step)), sizes


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.slow
def test_rewrites_and_time_grow_linearly(strategy):
    counted = {d: rewrites(residual_chain(d), *STRATEGIES[strategy](d)) for d in (1, 2, 4, 8)}
    per_block = counted[2] - counted[1]
    assert all(counted[d] <= counted[1] + per_block * (d - 1) * 1.1 for d in (4, 8)), counted

    def cpu_seconds(depth: int) -> float:
        tactics, mesh = STRATEGIES[strategy](depth)
        text = residual_chain(depth)
        best = float("inf")
        for _ in range(3):
            start = time.process_time()
            slicer.compile(text, mesh=mesh, tactics=slicer.parse_tactics(tactics))
            best = min(best, time.process_time() - start)
        return best

    one, eight = cpu_seconds(1), cpu_seconds(8)
    assert eight <= 10 * one, f"L=8 took {eight:.3f} s of CPU, {eight / one:.1f}x L=1 ({one:.3f} s)"


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.slow
def test_deep_chain_equals_numpy(strategy):
    depth = 4
    tactics, mesh = STRATEGIES[strategy](depth)
    prog = slicer.compile(residual_chain(depth), mesh=mesh, tactics=slicer.parse_tactics(tactics))
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((ROWS, MODEL)).astype(np.float32)]
    for _ in range(depth):
        arrays += [(rng.standard_normal((MODEL, HIDDEN)) / 4).astype(np.float32),
                   (rng.standard_normal((HIDDEN, MODEL)) / 4).astype(np.float32)]
    got = prog.run(*arrays)
    np.testing.assert_allclose(got, reference(arrays), rtol=1e-4, atol=1e-4)


def _cycling(op, journal):
    """A law that always rewrites: toggles an attribute of the function's first constant (a stand-in for two
    laws undoing each other)."""
    if op.name != "arith.constant":
        return False
    journal.rewriting(op)
    flag = "slicer.test_toggle"
    if flag in op.attributes:
        del op.attributes[flag]
    else:
        op.attributes[flag] = ir.UnitAttr.get()
    return True


def test_a_law_that_keeps_rewriting_stops_at_the_budget_with_a_reproducer(monkeypatch, tmp_path):
    monkeypatch.setattr(engine, "LAWS", engine.LAWS + (_cycling,))
    text = residual_chain(2)
    with make_context():
        module = slicer.apply_tactics(ir.Module.parse(text), slicer.parse_tactics("arg0.0=x"), mesh={"x": 2})
        ops = sum(1 for _ in walk_ops(module.operation))
        with pytest.raises(PropagationError) as caught:
            propagate_module(module.operation)
    message = str(caught.value)
    assert isinstance(caught.value, BudgetExceeded)
    assert "did not converge" in message and "'_cycling'" in message and "internal error" in message
    budget = int(re.search(r"budget of (\d+) rewrites", message).group(1))
    assert budget <= engine.REWRITES_PER_OP * (ops + 16)  # proportional to the program, not a fixed cap
    path = re.search(r"slicer-opt --pass-pipeline=\S+ (\S+)", message).group(1)
    with make_context():
        saved = ir.Module.parse(open(path).read())  # the reproducer is the propagation's input
        assert any(op.name == "slicer.loop" for op in walk_ops(saved.operation))


def test_the_budget_error_is_a_clear_compile_error_in_slicer_compile(monkeypatch):
    monkeypatch.setattr(engine, "LAWS", engine.LAWS + (_cycling,))
    with pytest.raises(slicer.CompileError, match="did not converge within its budget") as caught:
        slicer.compile(residual_chain(1), mesh={"x": 2}, tactics=slicer.parse_tactics("arg0.0=x"))
    assert "Traceback" not in str(caught.value) and "Reproduce: slicer-opt" in str(caught.value)
