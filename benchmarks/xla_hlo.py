"""XLA's side of `redistribution_vs_xla.py`: compile a reshard with JAX, read its collectives, memory and time.

Kept apart from the driver so that other benchmarks comparing with XLA can share it; timing XLA's reshards
on their own (device_put and jit, partial sums) is `xla_reshard`'s job, whose device setup this module
uses. JAX is optional (the ``bench`` extra: ``pip install -e '.[bench]'``); `available()` says whether it can
be used, and nothing here imports it before `devices(n)` has set ``XLA_FLAGS`` so that the CPU backend shows
``n`` devices.

A reshard is ``jax.jit(lambda a: a, in_shardings=src, out_shardings=dst)`` on a mesh whose devices are
``jax.devices()[:n]`` in row-major order (so device ``i`` is Slicer's linear rank ``i``); Slicer's types map
one to one onto `PartitionSpec`s (both list a dim's axes major to minor). From the compiled module's text
(``.lower(...).compile().as_text()``) `collectives` reads every collective XLA runs and what each device
receives:

| HLO op | received by a device |
| --- | --- |
| all-to-all (tuple form: one operand per member) | ``(k - 1)`` pieces |
| all-to-all (array form) | ``(k - 1) / k`` of its result |
| collective-permute | its result, if it is the target of a pair with another source (self pairs are copies) |
| all-gather | its result minus its operand |
| reduce-scatter | ``(k - 1)`` results |
| all-reduce | ``2 (k - 1) / k`` of its result (ring, as Slicer's cost model) |

``k`` is the group size: from the tuple arity, the operand and result shapes, or the ``replica_groups``
(explicit lists, iota ``[G,K]<=[...]``, or the mesh form ``mesh['a'=2,...] {'a'}`` with sub-axes
``{'a':(2)2}``). Peak live bytes per device: argument + output + temporaries - aliased, from
``compiled.memory_analysis()`` (XLA's own buffer assignment). Time: median over repetitions of running
the compiled reshard on an input already laid out as the source.
"""

from __future__ import annotations

import math
import re
import statistics
import time
from dataclasses import dataclass, field

import xla_reshard  # beside this file: the device setup

DTYPE_BYTES = {"f16": 2, "bf16": 2, "f32": 4, "f64": 8, "s8": 1, "u8": 1, "s16": 2, "s32": 4, "s64": 8, "pred": 1,
               "u32": 4, "u64": 8}
COLLECTIVES = ("all-to-all", "collective-permute", "all-gather", "reduce-scatter", "all-reduce")
_SHAPE = re.compile(r"\b([a-z]+[0-9]*)\[([0-9,]*)\]")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%([\w.\-]+)\s*=\s*(.*?)\s+([a-z][a-z0-9\-]*)\((.*)$")


def available() -> bool:
    return xla_reshard.unavailable() is None


def devices(n: int):
    """The first ``n`` JAX CPU devices (`xla_reshard.configure` sets ``XLA_FLAGS`` so that the host platform
    has ``n``; it must run before jax is imported)."""
    xla_reshard.configure(n)
    import jax  # optional dependency, imported only once XLA_FLAGS is set

    found = jax.devices()
    if len(found) < n:
        raise RuntimeError(f"JAX shows {len(found)} CPU devices, not {n}: was jax imported before XLA_FLAGS was set?")
    return found[:n]


def _bytes(shape_text: str) -> int:
    """Bytes of an HLO shape (a tuple: the sum of its elements)."""
    total = 0
    for dtype, dims in _SHAPE.findall(shape_text):
        if dtype not in DTYPE_BYTES:
            continue
        total += DTYPE_BYTES[dtype] * math.prod(int(d) for d in dims.split(",") if d)
    return total


def _shapes(shape_text: str) -> list[int]:
    return [DTYPE_BYTES[d] * math.prod(int(x) for x in dims.split(",") if x)
            for d, dims in _SHAPE.findall(shape_text) if d in DTYPE_BYTES]


def _group_size(line: str, mesh_sizes: dict[str, int] | None = None) -> int | None:
    """The replica-group size of a collective's line, or None if it names none."""
    m = re.search(r"replica_groups=\{\{([0-9,]*)\}", line)
    if m:
        return len([x for x in m.group(1).split(",") if x])
    m = re.search(r"replica_groups=\[(\d+),(\d+)\]<=", line)
    if m:
        return int(m.group(2))
    m = re.search(r"replica_groups=mesh\[([^\]]*)\][^{]*\{([^}]*)\}", line)
    if m:
        sizes = {name: int(size) for name, size in re.findall(r"'([^']+)'=(\d+)", m.group(1))}
        k = 1
        for part in m.group(2).split(","):
            part = part.strip()
            sub = re.match(r"'([^']+)':\((\d+)\)(\d+)", part)
            if sub:
                k *= int(sub.group(3))
            elif part:
                k *= sizes[part.strip("'")]
        return k
    return None


@dataclass
class Collective:
    op: str
    received: list[int]  # bytes each device (by id) receives
    line: str = field(repr=False)

    @property
    def busiest_bytes(self) -> int:
        return max(self.received)

    @property
    def total_bytes(self) -> int:
        return sum(self.received)


def collectives(hlo: str, n: int) -> list[Collective]:
    """The collectives of a compiled module's text, with what each device receives (see the docstring)."""
    shapes: dict[str, str] = {}
    found = []
    for line in hlo.splitlines():
        m = _INSTRUCTION.match(line)
        if not m:
            continue
        name, shape, op, rest = m.groups()
        shapes[name] = shape
        base = op.removesuffix("-start")
        if base not in COLLECTIVES or op.endswith("-done"):
            continue
        operands = re.findall(r"%([\w.\-]+)", rest.split(")")[0])
        result = _bytes(shape)
        operand = sum(_bytes(shapes.get(o, "")) for o in operands)
        if op.endswith("-start"):  # async: the result tuple holds (operand, result)
            parts = _shapes(shape)
            result = parts[-1] if parts else result
        k = _group_size(line)
        if base == "collective-permute":
            received = [0] * n
            pairs = re.findall(r"\{(\d+),(\d+)\}", line.split("source_target_pairs=")[1])
            for source, target in pairs:
                if source != target:
                    received[int(target)] = result
            found.append(Collective(base, received, line.strip()))
            continue
        if base == "all-gather":
            each = result - operand
        elif base == "all-to-all":
            pieces = _shapes(shape)
            if len(pieces) > 1:  # tuple form: one piece per member
                each = (len(pieces) - 1) * pieces[0]
            else:
                each = (k - 1) * result // k
        elif base == "reduce-scatter":
            k = k or (operand // result if result else 1)
            each = (k - 1) * result
        else:  # all-reduce
            each = -(-2 * (k - 1) * result // k)
        found.append(Collective(base, [int(each)] * n, line.strip()))
    return found


@dataclass
class XlaReshard:
    hlo: str
    collectives: list[Collective]
    bytes_per_device: int  # the most any device receives over the whole reshard
    total_bytes: int
    peak_bytes: int  # argument + output + temporaries - aliased, per device
    median_s: float | None


def compile_reshard(mesh_shape: tuple[int, ...], axis_names: tuple[str, ...], shape: tuple[int, ...],
                    src: list[tuple[str, ...]], dst: list[tuple[str, ...]], dtype: str = "f32", reps: int = 0,
                    seed: int = 0) -> XlaReshard:
    """Compile the reshard ``src -> dst`` (per dim: axis names major to minor) of a ``shape`` array on the
    first devices in a mesh of ``mesh_shape``; with ``reps``, also time it (median of ``reps`` runs)."""
    n = math.prod(mesh_shape)
    found = devices(n)
    import jax  # optional dependency (see devices)
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    mesh = Mesh(np.array(found).reshape(mesh_shape), axis_names)
    spec = lambda dims: PartitionSpec(*[tuple(d) if d else None for d in dims])  # noqa: E731
    in_sharding, out_sharding = NamedSharding(mesh, spec(src)), NamedSharding(mesh, spec(dst))
    jnp_dtype = {"f32": jnp.float32, "f64": jnp.float64, "f16": jnp.float16, "i32": jnp.int32}[dtype]
    fn = jax.jit(lambda a: a, in_shardings=in_sharding, out_shardings=out_sharding)
    compiled = fn.lower(jax.ShapeDtypeStruct(shape, jnp_dtype)).compile()
    hlo = compiled.as_text()
    found_collectives = collectives(hlo, n)
    memory = compiled.memory_analysis()
    peak = (memory.argument_size_in_bytes + memory.output_size_in_bytes + memory.temp_size_in_bytes
            - memory.alias_size_in_bytes)
    median = None
    if reps:
        x = jax.device_put(np.random.default_rng(seed).standard_normal(shape).astype(np.dtype(jnp_dtype)), in_sharding)
        compiled(x).block_until_ready()  # warm up
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            compiled(x).block_until_ready()
            times.append(time.perf_counter() - start)
        median = statistics.median(times)
    per_device = [sum(c.received[i] for c in found_collectives) for i in range(n)]
    return XlaReshard(hlo, found_collectives, max(per_device, default=0), sum(per_device), int(peak), median)
