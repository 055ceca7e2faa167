"""A pipelined step's module (`stage_module.py`) lowered to what each stage's ranks execute: a straight-line list of
instructions per stage, plain data a rank runs without MLIR (`runtime/execution/pipeline_exec.py`).

    {"op": "recv", "result": 3, "stage": 0, "message": 0, "shape": [2, 8, 32], "dtype": "float32"}   MPI receive
    {"op": "send", "operand": 5, "stage": 1, "message": 0}                                       MPI send (started)
    {"op": "call", "callee": "forward_1", "operands": [0, 3, ...], "results": [4]}              a stage program
    {"op": "zeros" | "add", ...}, {"op": "return", "operands": [...]}

Values are numbered per stage; the arguments come first, in order (`Stage.args`, their names). Checked while
lowering: every send has the receive of the same tag on its peer, of the same type, and the stages' lists run
to the end when sends do not wait and receives wait for their send (no deadlock), which the runtime relies on.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir
from mlir.dialects import arith
from mlir.dialects import func as func_dialect

from slicer.core import dtypes
from slicer.core import names as N
from slicer.core.errors import CompileError
from slicer.dialect import make_context


@dataclass(frozen=True)
class Stage:
    """One stage's instructions: `args` and `results` names, in order."""

    index: int
    args: tuple[str, ...]
    results: tuple[str, ...]
    instructions: tuple[dict, ...]


def _names(attrs) -> list[str]:
    return [ir.StringAttr(ir.DictAttr(a)[N.ARG_NAME_ATTR]).value for a in attrs]


def _tensor(value) -> tuple[list[int], str]:
    typ = ir.RankedTensorType(value.type)
    return list(typ.shape), dtypes.dtype_text(dtypes.numpy_dtype(str(typ.element_type)))


def lower_module(text: str) -> tuple[Stage, ...]:
    """The stages of the pipelined module `text`, in order of their `slicer.stage`."""
    stages = []
    with make_context():
        module = ir.Module.parse(text)
        for op in module.body.operations:
            if N.PIPELINE_STAGE_ATTR not in op.attributes:
                continue
            stages.append(_lower_function(op))
    stages.sort(key=lambda s: s.index)
    check_transfers(stages)
    return tuple(stages)


def _lower_function(func) -> Stage:
    index = ir.IntegerAttr(func.attributes[N.PIPELINE_STAGE_ATTR]).value
    block = func.regions[0].blocks[0]
    ids: dict = {}

    def id_of(value) -> int:
        return ids.setdefault(value, len(ids))

    for arg in block.arguments:
        id_of(arg)
    instructions = []
    for op in block.operations:
        name = op.operation.name
        attrs = op.operation.attributes
        if name == N.RECV:
            shape, dtype = _tensor(op.results[0])
            instructions.append({"op": "recv", "result": id_of(op.results[0]), "shape": shape, "dtype": dtype,
                                 **_p2p(attrs)})
        elif name == N.SEND:
            instructions.append({"op": "send", "operand": id_of(op.operands[0]), **_p2p(attrs),
                                 "type": str(op.operands[0].type)})
        elif name == func_dialect.CallOp.OPERATION_NAME:
            callee = ir.FlatSymbolRefAttr(attrs["callee"]).value
            instructions.append({"op": "call", "callee": callee, "operands": [id_of(v) for v in op.operands],
                                 "results": [id_of(v) for v in op.results]})
        elif name == arith.ConstantOp.OPERATION_NAME:
            shape, dtype = _tensor(op.results[0])
            instructions.append({"op": "zeros", "result": id_of(op.results[0]), "shape": shape, "dtype": dtype})
        elif name == arith.AddFOp.OPERATION_NAME:
            instructions.append({"op": "add", "operands": [id_of(v) for v in op.operands],
                                 "result": id_of(op.results[0])})
        elif name == func_dialect.ReturnOp.OPERATION_NAME:
            instructions.append({"op": "return", "operands": [id_of(v) for v in op.operands]})
        else:
            raise CompileError(f"stage {index} of the pipelined step: {name} cannot run between the stage's "
                               "programs (only calls, transfers, zeros and additions do)")
    ftype = ir.FunctionType(ir.TypeAttr(func.attributes[N.FUNCTION_TYPE_ATTR]).value)
    args = _names(ir.ArrayAttr(func.attributes[N.ARG_ATTRS_ATTR]))
    results = _names(ir.ArrayAttr(func.attributes[N.RES_ATTRS_ATTR])) if ftype.results else []
    return Stage(index, tuple(args), tuple(results), tuple(instructions))


def _p2p(attrs) -> dict:
    return {"stage": ir.IntegerAttr(attrs[N.P2P_PEER_ATTR]).value,
            "message": ir.IntegerAttr(attrs[N.P2P_TAG_ATTR]).value}


def check_transfers(stages: list[Stage]) -> None:
    """CompileError unless every send meets its receive (same tag, peer and type) and the stages run to the
    end with sends that do not wait (module docstring)."""
    sends = [(i["message"], s.index, i["stage"]) for s in stages for i in s.instructions if i["op"] == "send"]
    recvs = [(i["message"], i["stage"], s.index) for s in stages for i in s.instructions if i["op"] == "recv"]
    for kind, keys in (("sends", sends), ("receives", recvs)):
        if len(set(keys)) != len(keys):
            tag, source, target = next(k for k in keys if keys.count(k) > 1)
            raise CompileError(f"the pipelined step {kind} tag {tag} from stage {source} to stage {target} twice")
    for key in set(sends) ^ set(recvs):
        tag, source, target = key
        raise CompileError(f"the pipelined step sends tag {tag} from stage {source} to stage {target}, but "
                           f"{'no receive' if key in set(sends) else 'no send'} matches it")
    position = [0] * len(stages)
    sent: set = set()
    while any(position[s.index] < len(s.instructions) for s in stages):
        moved = False
        for stage in stages:
            while position[stage.index] < len(stage.instructions):
                instruction = stage.instructions[position[stage.index]]
                waiting = instruction["op"] == "recv"
                if waiting and (instruction["message"], instruction["stage"], stage.index) not in sent:
                    break
                if instruction["op"] == "send":
                    sent.add((instruction["message"], stage.index, instruction["stage"]))
                position[stage.index] += 1
                moved = True
        if not moved:
            raise CompileError(f"the pipelined step deadlocks: stages wait at {position} for each other")


__all__ = ["Stage", "check_transfers", "lower_module"]
