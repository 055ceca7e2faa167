"""Partitioning strategies as tactics, composed: data parallelism, Megatron tensor parallelism, sequence
parallelism and ZeRO-3/FSDP parameter sharding, alone and together, on an MLP (relu and tanh-gelu), a
multi-head attention and a transformer block (docs/tactics.md, "Composing strategies").

    python examples/strategies/strategies.py                  # every strategy: collectives, bytes, memory
    python examples/strategies/strategies.py --ranks          # ... and run each on 4 MPI ranks vs numpy

Mesh axes: x for data, y for model. Tactics are applied in the order written: the earlier tactics decide
how each op is computed; a later tactic on an axis already in use only says how a value is *stored*, and
the value is redistributed where it is used (ZeRO-3: parameters stored sharded over the data axis are
gathered just before their use; sequence parallelism after Megatron: activations stored sharded over the
model axis are gathered before the first matmul and reduce-scattered after the second).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parent

MEGATRON_MLP = "arg1.1=y;arg2.0=y;arg3.0=y"
MEGATRON_ATTENTION = "arg1.1=y;arg2.1=y;arg3.1=y;arg4.0=y"
MEGATRON_BLOCK = "arg3.1=y;arg4.1=y;arg5.1=y;arg6.0=y;arg9.1=y;arg10.0=y;arg11.0=y"

# The table for x @ w1 + b1 -> activation -> @ w2 (arguments x, w1, b1, w2).
MLP_STRATEGIES = {
    "data": ("arg0.0=x", "x"),
    "megatron": (MEGATRON_MLP, "y"),
    "data+megatron": ("arg0.0=x;" + MEGATRON_MLP, "xy"),
    "megatron+sequence": (MEGATRON_MLP + ";arg0.0=y;result0.0=y", "y"),
    "fsdp": ("arg0.0=x;arg1.0=x;arg2.0=x;arg3.0=x", "x"),
    "data+megatron+fsdp": ("arg0.0=x;" + MEGATRON_MLP + ";arg1.0=x;arg3.1=x", "xy"),
}

# program -> strategy -> (tactics in order, the mesh axes it uses)
STRATEGIES: dict[str, dict[str, tuple[str, str]]] = {
    "mlp": MLP_STRATEGIES,  # relu(x @ w1 + b1) @ w2
    "gelu_mlp": MLP_STRATEGIES,  # gelu(x @ w1 + b1) @ w2: the same arguments, so the same tactics
    "attention": {
        "data": ("arg0.0=x", "x"),
        "megatron": (MEGATRON_ATTENTION, "y"),
        "data+megatron": ("arg0.0=x;" + MEGATRON_ATTENTION, "xy"),
        "fsdp": ("arg0.0=x;arg1.0=x;arg2.0=x;arg3.0=x;arg4.0=x", "x"),
    },
    "transformer_block": {
        "data": ("arg0.0=x", "x"),
        "megatron": (MEGATRON_BLOCK, "y"),
        "data+megatron": ("arg0.0=x;" + MEGATRON_BLOCK, "xy"),
        "fsdp": ("arg0.0=x;" + ";".join(f"arg{i}.0=x" for i in range(1, 12)), "x"),
    },
}


def program_path(name: str) -> Path:
    return EXAMPLES / "mlp.mlir" if name == "mlp" else HERE / f"{name}.mlir"


def meshes(axes: str) -> list[dict[str, int]]:
    """The meshes a strategy runs on: 2x2 always, and a 1-D mesh of 4 when it uses one axis."""
    both = {"x": 2, "y": 2}
    return [both] if len(axes) == 2 else [both, {axes: 4}]


# -- independent numpy references (float64) -------------------------------------------------------------------
def _layernorm(x, g, b):
    c = x - x.mean(-1, keepdims=True)
    return c / np.sqrt((c * c).mean(-1, keepdims=True) + 1e-5) * g + b


def _attention(x, wq, wk, wv, wo):
    q, k, v = (np.einsum("bsd,dhe->bhse", x, w) for w in (wq, wk, wv))
    s = np.einsum("bhse,bhte->bhst", q, k) * 0.5
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.einsum("bhse,hed->bsd", np.einsum("bhst,bhte->bhse", p, v), wo)


def _gelu(v):
    return 0.5 * v * (1 + np.tanh(0.7978845608 * (v + 0.044715 * v ** 3)))


REFERENCES = {
    "mlp": lambda x, w1, b1, w2: np.maximum(x @ w1 + b1, 0) @ w2,
    "gelu_mlp": lambda x, w1, b1, w2: _gelu(x @ w1 + b1) @ w2,
    "attention": _attention,
    "transformer_block": lambda x, g1, be1, wq, wk, wv, wo, g2, be2, w1, b1, w2: (
        (h := x + _attention(_layernorm(x, g1, be1), wq, wk, wv, wo))
        + _gelu(_layernorm(h, g2, be2) @ w1 + b1) @ w2),
}


def inputs_for(prog, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    g = prog.graph
    return [(rng.standard_normal(g.values[n].dist.shape) * 0.5).astype(g.values[n].numpy_dtype) for n in g.args]


def reference(name: str, arrays) -> np.ndarray:
    return REFERENCES[name](*[np.asarray(a, np.float64) for a in arrays])


def parameter_bytes(prog) -> tuple[int, int]:
    """(bytes of the parameters, every argument but the first, per device; the same unpartitioned)."""
    g = prog.graph
    params = g.args[1:]
    per_device = sum(g.value_bytes(n) for n in params)
    whole = sum(int(np.prod(g.values[n].dist.shape)) * g.values[n].numpy_dtype.itemsize for n in params)
    return per_device, whole


def main(argv=None) -> int:
    from mlir import ir

    import slicer
    from slicer.dialect import make_context
    from slicer.spmd import report

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", action="store_true", help="also run every strategy on 4 MPI ranks vs numpy")
    args = parser.parse_args(argv)
    for name, strategies in STRATEGIES.items():
        text = program_path(name).read_text()
        for strategy, (tactics, axes) in strategies.items():
            for mesh in meshes(axes):
                prog = slicer.compile(text, mesh=slicer.Mesh(**mesh), tactics=slicer.parse_tactics(tactics))
                with make_context():
                    collectives = report(ir.Module.parse(prog.spmd)).collectives
                per_device, whole = parameter_bytes(prog)
                moved = ", ".join(f"{c.op.split('.')[-1]}[{','.join(c.mesh_axes)}] {c.bytes_received_per_device} B"
                                  for c in collectives) or "none"
                line = (f"{name:18} {strategy:20} {str(prog.mesh):8} params {per_device:6} B/device "
                        f"(whole {whole} B)  collectives: {moved}")
                if args.ranks:
                    arrays = inputs_for(prog)
                    got = prog.run(*arrays, ranks=prog.mesh.device_count, oversubscribe=True)
                    error = float(np.max(np.abs(got - reference(name, arrays))))
                    line += f"  max |error| vs numpy {error:.1e}"
                print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
