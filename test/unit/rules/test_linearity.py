"""`linear_in`: may partial sums flow through an elementwise op unreduced (slicer.rules.linearity)?"""

import pytest
from mlir import ir

import slicer.dialect as sd
from slicer.rules import constant_term_inputs, linear_at, linear_in

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


def _value(op: ir.Operation, position: int) -> ir.Value:
    return list(op.regions[0].blocks[0].operations)[position].results[0]


@pytest.mark.parametrize("body, partial, position, constants", [
    # a replicated input added to partial ones: held by one device, it makes the sum linear
    ("%t = arith.addf %ic, %ia : f32\n%u = arith.addf %t, %ib : f32\nlinalg.yield %u : f32", {0, 1}, 1, {2}),
    # a constant term with a free factor, inside a scaled sum, reads %c (the captured %s is a coefficient)
    ("%t = arith.mulf %ic, %s : f32\n%u = arith.subf %ia, %t : f32\n%v = arith.divf %u, %s : f32\n"
     "linalg.yield %v : f32", {0}, 2, {2}),
    # already linear: no constant term
    ("%t = arith.addf %ia, %ib : f32\n%u = math.sqrt %t : f32\nlinalg.yield %u : f32", {0, 1}, 0, set()),
])
def test_constant_terms_of_a_value(body, partial, position, constants):
    op = generic(body)
    value = _value(op, position)
    assert constant_term_inputs(op, value, partial) == constants
    assert linear_at(op, value, partial | constants) is None


@pytest.mark.parametrize("body, partial, position", [
    ("%k = arith.constant 1.0 : f32\n%t = arith.addf %ia, %k : f32\nlinalg.yield %t : f32", {0}, 1),  # a literal
    ("%t = arith.addf %ia, %s : f32\nlinalg.yield %t : f32", {0}, 0),  # a captured scalar: no input to hold
    ("%t = math.exp %ia : f32\n%u = arith.addf %t, %ic : f32\nlinalg.yield %u : f32", {0}, 1),  # not linear
])
def test_no_constant_terms_to_hold(body, partial, position):
    op = generic(body)
    assert constant_term_inputs(op, _value(op, position), partial) is None


def test_a_constant_term_read_elsewhere_is_no_term():
    """%c added once and multiplied by a partial input too: held by one device, the product would be wrong."""
    op = generic("%t = arith.addf %ia, %ic : f32\n%u = arith.mulf %ia, %ic : f32\n%v = arith.addf %t, %u : f32\n"
                 "linalg.yield %v : f32")
    value = _value(op, 2)
    assert constant_term_inputs(op, value, {0}) == {2}
    assert "product of two values" in linear_at(op, value, {0, 2})


def test_a_rank_0_sum_is_elementwise():
    text = ("func.func @f(%a: tensor<f32>, %b: tensor<f32>) -> tensor<f32> {\n  %e = tensor.empty() : tensor<f32>\n"
            "  %r = linalg.generic {indexing_maps = [affine_map<() -> ()>, affine_map<() -> ()>, affine_map<() -> ()>],"
            " iterator_types = []} ins(%a, %b : tensor<f32>, tensor<f32>) outs(%e : tensor<f32>) {\n"
            "  ^bb0(%ia: f32, %ib: f32, %o: f32):\n  %t = arith.addf %ia, %ib : f32\n  linalg.yield %t : f32\n"
            "  } -> tensor<f32>\n  return %r : tensor<f32>\n}")
    context = sd.make_context()
    with context, ir.Location.unknown():
        module = ir.Module.parse(text)
    _ALIVE[:] = [context, module]
    op = next(op for op in sd.walk_ops(module) if op.name == "linalg.generic")
    assert linear_in(op, {0, 1}) is None
