"""Is a linalg body's reduction an addition? (may a reduction loop be split into a `sum`?)

Splitting a reduction loop into blocks and adding the partial results is exact
only when the body accumulates into its output by addition:
    ^bb0(%in..., %out): ... %v = f(%in...) ; %r = arith.addf %out, %v ; linalg.yield %r
i.e. the yielded value is `arith.addf`/`arith.addi` of the output block argument
and a value computed from the inputs alone. Anything else (a max, a product, an
addition whose other term reads the output, yielding the output unchanged) is
not additive, and the reason names what was found. The accumulation form
`combine(out, x)` is read as the kernel generators read it
(`slicer.core.linalg_facts.combined_with`); only the question asked of it is
the rules' own.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith

from slicer.core.linalg_facts import combined_with

ADDITIONS = (arith.AddFOp.OPERATION_NAME, arith.AddIOp.OPERATION_NAME)


def reduction_combiner(body: ir.Block, result: int, num_inputs: int) -> str | None:
    """None if result `result` of a linalg body accumulates by addition, else why not.

    `body` is the op's region block (arguments: inputs, then outputs), whose last
    op is `linalg.yield`. The reason reads "reduction combiner is <op>, not an
    addition" and the like, to be prefixed by the result it concerns.
    """
    out = body.arguments[num_inputs + result]
    ops = body.operations
    yielded = ops[len(ops) - 1].operands[result]
    if yielded == out:
        return "body yields its output unchanged (there is no combiner to split)"
    owner = yielded.owner
    if isinstance(owner, ir.Block):
        return "body yields an input element, overwriting the output (there is no combiner to split)"
    combiner = owner.operation
    if combiner.name not in ADDITIONS:
        return f"reduction combiner is {combiner.name}, not an addition"
    found = combined_with(yielded, out)
    if found is None:
        return (f"reduction combiner {combiner.name} does not add to the output block argument "
                "(the output must be one of its two operands)")
    _, term = found
    if _depends_on(term, out, body):
        return (f"reduction combiner is {combiner.name}, but the value it adds to the output also reads the "
                "output, so the partial results do not simply add up")
    return None


def _depends_on(value: ir.Value, target: ir.Value, body: ir.Block) -> bool:
    """Whether `value` is computed (within `body`) from `target`."""
    seen: set[int] = set()
    stack = [value]
    while stack:
        current = stack.pop()
        if current == target:
            return True
        owner = current.owner
        if isinstance(owner, ir.Block):
            continue  # another block argument (an input)
        op = owner.operation
        if op.parent is None or op.block != body:
            continue  # defined outside the body: a captured constant
        key = hash(op)
        if key in seen:
            continue
        seen.add(key)
        stack.extend(_operands_including_nested(op))
    return False


def _operands_including_nested(op: ir.Operation) -> list[ir.Value]:
    values = list(op.operands)
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                values.extend(_operands_including_nested(inner.operation))
    return values


MAXIMA = (arith.MaximumFOp.OPERATION_NAME, arith.MaxNumFOp.OPERATION_NAME, arith.MaxSIOp.OPERATION_NAME,
          arith.MaxUIOp.OPERATION_NAME)


def is_max_reduction(body: ir.Block, result: int, num_inputs: int) -> bool:
    """Does result `result` of a linalg body accumulate by maximum, `max(out, f(inputs))` (log-softmax's
    max over the vocabulary)? A maximum is idempotent: blocks reduced on their own, then the maxima of all
    blocks reduced again (an all_reduce by maximum), give the maximum of the whole, whatever the init."""
    out = body.arguments[num_inputs + result]
    ops = body.operations
    yielded = ops[len(ops) - 1].operands[result]
    if isinstance(yielded.owner, ir.Block) or yielded.owner.operation.name not in MAXIMA:
        return False
    found = combined_with(yielded, out)
    return found is not None and not _depends_on(found[1], out, body)
