"""Partition PyTorch models with Slicer: the models of models.py (a GPT-2 block, torch's own
nn.TransformerEncoderLayer, a ViT, a BERT encoder), each under its strategies: Megatron-style (heads and MLP
hidden units over y), sequence-parallel and data-parallel.

    python examples/torch/partition.py               # collectives, per-device parameter bytes, vs torch eager
    python examples/torch/partition.py --ranks 4     # ... running each on 4 MPI ranks (default: simulator)

What a user writes (see README.md here):

    imported = slicer.from_torch(model, x)                       # arguments: x, then every parameter by name
    prog = slicer.compile(imported, mesh=slicer.Mesh(y=4),
                          tactics=slicer.parse_tactics("attn.c_proj.weight.1=y;mlp.c_fc.weight.0=y;"
                                                       "mlp.c_fc.bias.0=y;mlp.c_proj.weight.1=y"))
    out = prog.run(x, ranks=4)                                   # numpy; the parameters are bound
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import models

import slicer


def collectives_of(prog) -> list[str]:
    from mlir import ir

    from slicer.dialect import make_context
    from slicer.spmd import report

    with make_context():
        return [f"{c.op.split('.')[-1]}[{','.join(c.mesh_axes)}] {c.bytes_received_per_device} B"
                for c in report(ir.Module.parse(prog.spmd)).collectives]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, choices=(2, 4), help="run on this many MPI ranks (mesh of that size)")
    args = parser.parse_args(argv)
    size = args.ranks or 4
    for name, build in models.MODELS.items():
        model, inputs = build()
        start = time.perf_counter()
        imported = slicer.from_torch(model, *inputs)
        print(f"{name}: imported in {time.perf_counter() - start:.2f} s, arguments "
              f"{', '.join(imported.arg_names)}")
        want = models.eager(model, inputs)
        for strategy, (tactics, axis) in models.STRATEGIES[name].items():
            start = time.perf_counter()
            prog = slicer.compile(imported, mesh=slicer.Mesh(**{axis: size}), tactics=slicer.parse_tactics(tactics))
            compiled = time.perf_counter() - start
            got = prog.run(*inputs, ranks=args.ranks, oversubscribe=True)
            where = f"{args.ranks} MPI ranks" if args.ranks else "the simulator"
            print(f"  {strategy:9} compile {compiled:.2f} s; collectives: {', '.join(collectives_of(prog)) or 'none'}; "
                  f"relative error vs torch on {where}: {models.relative_error(got, want):.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
