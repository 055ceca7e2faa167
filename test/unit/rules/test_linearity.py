"""`linear_in`: may partial sums flow through an elementwise op unreduced (slicer.rules.linearity)?"""

import pytest
from mlir import ir

import slicer.dialect as sd
from slicer.rules import linear_in

_ALIVE = []
ID = "affine_map<(i) -> (i)>"


def generic(body: str, inputs: int = 3) -> ir.Operation:
    """A 1-D elementwise linalg.generic over `inputs` inputs %a, %b, %c (f32 elements) and output %o."""
    names = "abc"[:inputs]
    args = ", ".join(f"%{n}: tensor<4xf32>" for n in names)
    ins = ", ".join(f"%{n}" for n in names)
    text = (f"func.func @f({args}, %s: f32) -> tensor<4xf32> {{\n  %e = tensor.empty() : tensor<4xf32>\n"
            f"  %r = linalg.generic {{indexing_maps = [{', '.join([ID] * (inputs + 1))}], iterator_types = "
            f"[\"parallel\"]}} ins({ins} : {', '.join(['tensor<4xf32>'] * inputs)}) outs(%e : tensor<4xf32>) {{\n"
            f"  ^bb0({', '.join(f'%i{n}: f32' for n in names)}, %o: f32):\n{body}\n  }} -> tensor<4xf32>\n"
            "  return %r : tensor<4xf32>\n}")
    context = sd.make_context()
    with context, ir.Location.unknown():
        module = ir.Module.parse(text)
    _ALIVE[:] = [context, module]
    return next(op for op in sd.walk_ops(module) if op.name == "linalg.generic")


@pytest.mark.parametrize("body, partial", [
    ("%t = arith.addf %ia, %ib : f32\n%u = arith.addf %t, %ic : f32\nlinalg.yield %u : f32", {0, 1, 2}),
    ("%t = arith.subf %ia, %ib : f32\n%u = arith.negf %t : f32\nlinalg.yield %u : f32", {0, 1}),
    # free coefficients: another (replicated) input, a captured scalar, a constant
    ("%t = arith.mulf %ic, %ia : f32\n%u = arith.mulf %ib, %s : f32\n%v = arith.addf %t, %u : f32\n"
     "linalg.yield %v : f32", {0, 1}),
    ("%k = arith.constant 3.0 : f32\n%t = arith.divf %ia, %k : f32\n%v = arith.addf %t, %ib : f32\n"
     "linalg.yield %v : f32", {0, 1}),
])
def test_linear(body, partial):
    assert linear_in(generic(body), partial) is None


@pytest.mark.parametrize("body, partial, why", [
    ("%t = arith.mulf %ia, %ib : f32\nlinalg.yield %t : f32", {0, 1}, "product of two values"),
    ("%k = arith.constant 1.0 : f32\n%t = arith.addf %ia, %k : f32\nlinalg.yield %t : f32", {0},
     "constant term"),
    ("%t = arith.addf %ia, %o : f32\nlinalg.yield %t : f32", {0}, "output's old value"),
    ("%t = math.exp %ia : f32\nlinalg.yield %t : f32", {0}, "'math.exp' of a partial input"),
    ("%t = arith.divf %ib, %ia : f32\nlinalg.yield %t : f32", {0, 1}, "division by a value"),
    # a replicated input added to partial ones would be counted once per device
    ("%t = arith.addf %ia, %ic : f32\nlinalg.yield %t : f32", {0}, "constant term"),
])
def test_not_linear(body, partial, why):
    assert why in linear_in(generic(body), partial)


def test_reductions_and_bad_inputs_are_refused():
    op = generic("%t = arith.addf %ia, %ib : f32\nlinalg.yield %t : f32")
    assert "are not inputs" in linear_in(op, {5})
    assert "are not inputs" in linear_in(op, set())
