# RUN: %PYTHON %s | FileCheck %s
# The slicer dialect's Python builders, in the style of upstream MLIR's Python tests.

import gc

from mlir import ir
from mlir.dialects import arith, func

import slicer.dialect as sd
from slicer.dialect.verifier import verify


def run(f):
    print("\nTEST:", f.__name__)
    f()
    gc.collect()
    assert ir.Context._get_live_count() == 0, "a Context leaked"
    return f


# CHECK-LABEL: TEST: build_loop_slice_annotate
@run
def build_loop_slice_annotate():
    with sd.make_context(), ir.Location.unknown():
        module = ir.Module.create()
        with ir.InsertionPoint(module.body):
            # CHECK: "slicer.mesh"() {axes = ["x", "y"], shape = array<i64: 2, 4>, sym_name = "mesh"}
            sd.mesh("mesh", {"x": 2, "y": 4})
            t = ir.RankedTensorType.get([8, 4], ir.F32Type.get())

            # CHECK: func.func @f(%[[A:.*]]: tensor<8x4xf32>)
            @func.FuncOp.from_py_func(t)
            def f(a):
                # CHECK: "slicer.loop"() ({
                # CHECK-NEXT: ^bb0(%[[R:.*]]: !slicer.range<["x", "y"], 8 : i64>):
                loop = sd.loop([t], mesh="mesh", action=sd.TileAction(0), range=sd.RangeType(("x", "y"), 8))
                with ir.InsertionPoint(loop.body):
                    # CHECK-NEXT: %[[B:.*]] = "slicer.slice"(%[[A]], %[[R]]) {dim = 0 : i64} : {{.*}} -> tensor<1x4xf32>
                    block = sd.slice_(a, loop.range_arg, 0)
                    # CHECK-NEXT: %[[N:.*]] = arith.negf %[[B]] : tensor<1x4xf32>
                    # CHECK-NEXT: tosa.yield %[[N]] : tensor<1x4xf32>
                    sd.yield_([arith.negf(block)])
                # CHECK: }) {action = #slicer.tile<0 : i64>, mesh = @mesh} : () -> tensor<8x4xf32>
                # CHECK: "slicer.annotate"(%{{.*}}) {sharding = #slicer.sharding<@mesh, {{\[\["x"\], \["y"\]\]}}>}
                return sd.annotate(loop.results[0], sd.Sharding("mesh", (("x",), ("y",))))

        print(module)
        # CHECK: verified: True []
        print("verified:", module.operation.verify(), verify(module))


# CHECK-LABEL: TEST: views_read_back_parameters
@run
def views_read_back_parameters():
    with sd.make_context():
        rng = sd.RangeType.of(ir.Type.parse('!slicer.range<["x", "y"], 8>'))
        # CHECK: RangeType(axes=('x', 'y'), size=8)
        print(repr(rng))
        # CHECK: TileAction(dim=2) SumAction()
        print(repr(sd.action_of(ir.Attribute.parse("#slicer.tile<2>"))),
              repr(sd.action_of(ir.Attribute.parse("#slicer.sum"))))
        # CHECK: {{^\[\[x,y\],\[\]\]$}}
        print(sd.Sharding.of(ir.Attribute.parse('#slicer.sharding<@mesh, [["x", "y"], []]>')))
