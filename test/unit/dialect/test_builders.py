"""Python builders and typed views of the slicer dialect."""

import numpy as np
from mlir import ir
from mlir.dialects import func

import slicer.core.names as names
import slicer.dialect as sd
from slicer.core.mesh import Mesh
from slicer.dialect.verifier import verify
from slicer.lowering import compile_function


def build_tiled_negate():
    context = sd.make_context()
    with context, ir.Location.unknown():
        module = ir.Module.create()
        with ir.InsertionPoint(module.body):
            sd.mesh("mesh", {"x": 2, "y": 3})
            t = ir.RankedTensorType.get([6, 4], ir.F32Type.get())

            @func.FuncOp.from_py_func(t)
            def negate(a):
                loop = sd.loop([t], mesh="mesh", action=sd.TileAction(0), range=sd.RangeType(("y",), 3))
                with ir.InsertionPoint(loop.body):
                    block = sd.slice_(a, loop.range_arg, 0)
                    from mlir.dialects import arith

                    sd.yield_([arith.negf(block)])
                return sd.annotate(loop.results[0], sd.Sharding("mesh", (("y",), ())))

        return context, module


def test_builders_produce_verified_ir_with_typed_views():
    context, module = build_tiled_negate()
    with context:
        assert module.operation.verify()
        assert verify(module) == []
        (loop_op,) = list(sd.walk_ops(module, names.LOOP))
        loop = sd.LoopOp(loop_op)
        assert loop.mesh == "mesh"
        assert loop.action == sd.TileAction(0)
        assert loop.range == sd.RangeType(("y",), 3)
        assert len(loop.yielded) == 1
        (slice_op,) = list(sd.walk_ops(module, names.SLICE))
        assert sd.SliceOp(slice_op).dim == 0
        assert str(sd.SliceOp(slice_op).result.type) == "tensor<2x4xf32>"
        (annotate_op,) = list(sd.walk_ops(module, names.ANNOTATE))
        assert sd.AnnotateOp(annotate_op).sharding == sd.Sharding("mesh", (("y",), ()))
        assert sd.find_meshes(module)["mesh"].mesh() == Mesh(x=2, y=3)


def test_built_program_runs():
    _, module = build_tiled_negate()
    a = np.arange(24, dtype=np.float32).reshape(6, 4)
    np.testing.assert_array_equal(compile_function(module)(a), -a)


def test_attribute_views_round_trip():
    with sd.make_context():
        for rng in (sd.RangeType(("x",), 2), sd.RangeType(("x", "y"), 6)):
            assert sd.RangeType.of(rng.to_type()) == rng
        for action in (sd.TileAction(3), sd.SumAction()):
            assert sd.action_of(action.to_attr()) == action
        sharding = sd.Sharding("my mesh", (("x", "y"), (), ("z",)))
        assert sd.Sharding.of(sharding.to_attr()) == sharding
        assert sd.RangeType.of(ir.Type.parse("tensor<2xf32>")) is None
