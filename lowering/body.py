"""Re-emitting a linalg body's scalar ops in generated kernels, as scalars or as vectors.

The generated kernels (`contract.py`, `rows.py`) copy the arith/math ops of a `linalg.generic` body
into their loops, in generic form with each scalar type `T` replaced by `vector<L x T>` when the
loop is vectorized. Constants inside the body are emitted as scalars and broadcast; math functions
LLVM would scalarize (exp, tanh, erf, log) become the arith expansions of `vector_math.py`.
"""

from __future__ import annotations

from mlir import ir

from .emitter import Emitter
from .vector_math import EXPANDED, expand

ELEMENTWISE_DIALECTS = ("arith.", "math.")


def is_elementwise(op: ir.Operation) -> bool:
    """An op the generated kernels can re-emit: pure arith/math with one result and no regions."""
    return op.name.startswith(ELEMENTWISE_DIALECTS) and not len(op.regions) and len(op.results) == 1


def vector_type(type_: ir.Type | str, lanes: int | None) -> str:
    return str(type_) if lanes is None else f"vector<{lanes}x{type_}>"


def emit_op(e: Emitter, op: ir.Operation, env: dict, lanes: int | None) -> str:
    """Emit one body op with its operands from `env` (value -> SSA name); returns the result's name."""
    result_type = op.results[0].type
    attrs = ", ".join(f"{a} = {op.attributes[a]}" for a in op.attributes)
    if not len(op.operands):
        scalar = e.value(f'"{op.name}"() {{{attrs}}} : () -> ({result_type})', "x")
        if lanes is None:
            return scalar
        return e.value(f"vector.broadcast {scalar} : {result_type} to {vector_type(result_type, lanes)}", "x")
    operands = [env[o] for o in op.operands]
    if len(operands) == 1 and op.name in EXPANDED:
        expanded = expand(e, op.name, operands[0], vector_type(result_type, lanes))
        if expanded is not None:
            return expanded
    in_types = ", ".join(vector_type(o.type, lanes) for o in op.operands)
    return e.value(f'"{op.name}"({", ".join(operands)}) {{{attrs}}} : ({in_types}) -> '
                   f'({vector_type(result_type, lanes)})', "x")
