"""Kernel extraction: an SPMD function cut at its collectives into a dataflow graph.

Nodes, in program order:
- `KernelNode`: a collective-free segment (a maximal one, unless long: `cut.py`), as one `func.func` (`kernel_<i>`)
  whose arguments are the tensors it needs (plus the device coordinate as a
  `tensor<n x i64>` when the segment uses `shard.process_multi_index`) and whose
  results are the tensors later nodes or the function's results use. Cheap values
  (constants, `tensor.empty`, fills of constants and generics yielding one, the device index) are recomputed
  in each kernel instead of being passed around, and views (reshapes, casts) applied again to their source.
- `CollectiveNode`: one collective, as the redistribution step it performs
  (`slicer.redistribution` semantics, so the numpy simulator and the MPI executor
  share one definition).
Values are named `%<n>` (function arguments first). The graph serialises to JSON
(with all kernels in one MLIR module; `aot.compile_kernels` compiles and caches them one by one) and prints
readably (`slicer-opt --print-kernel-graph`). Both the in-process simulator
(`slicer.runtime.simulation.simulator`) and the MPI runtime (`slicer.runtime`) execute it.

`graph_builder.build_kernel_graph` builds one from an SPMD module (MLIR); this module is the graph's data only
and imports no MLIR, so an MPI rank reads its graph without loading the bindings.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from slicer.core import dtypes
from slicer.core.errors import KernelGraphError
from slicer.redistribution import DistType, Mesh, step_from_fields
from slicer.redistribution.collective import Collective


@dataclass(frozen=True)
class Value:
    """A tensor flowing between nodes: its name, local shape, dtype and distributed type. `varying`: the loop
    axes of a value computed in a loop body (devices that differ on them hold different members of the loop's
    family, so `dist` describes one member, see slicer.spmd.dist_types); `loc`: where the source defines it
    (`file:line:col`, "" when unknown, e.g. for collectives)."""

    name: str
    local_shape: tuple[int, ...]
    dtype: str
    dist: DistType
    varying: tuple[str, ...] = ()
    loc: str = ""

    @property
    def numpy_dtype(self) -> np.dtype:
        dtype = dtypes.numpy_dtype(self.dtype)
        if dtype is None:
            raise KernelGraphError(f"value {self.name}: {dtypes.unsupported(self.dtype)}")
        return dtype

    @functools.cached_property
    def nbytes(self) -> int:
        """Bytes of one device's block (read once: liveness counts and pricing ask it of every value again and
        again, 4.4 million times in one calibration's fit)."""
        return math.prod(self.local_shape) * self.numpy_dtype.itemsize


@dataclass(frozen=True)
class KernelNode:
    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    needs_coords: bool


@dataclass(frozen=True)
class CollectiveNode:
    op: str
    step: Collective  # a slicer.redistribution step (AllGather, ...), its type_after the result's type
    input: str
    output: str


@dataclass
class KernelGraph:
    entry: str
    mesh: Mesh
    values: dict[str, Value]
    args: tuple[str, ...]
    results: tuple[str, ...]
    result_sources: tuple[str, ...]  # "requested", "default" or "tactic <label>" per result
    result_dists: tuple[DistType, ...]  # the function's result types (what the blocks assemble into)
    nodes: list = field(default_factory=list)
    kernels_mlir: str = ""
    # The logical global shapes of the arguments and results where they differ from their types' (padded)
    # shapes: dims that do not divide their tiles (docs/partition.md, "Uneven shapes"); index -> shape.
    arg_shapes: dict = field(default_factory=dict)
    result_shapes: dict = field(default_factory=dict)
    # the units bf16 contractions run on ("auto": the CPU's best; "amx", "avx512bf16", "f32" forced), which the
    # kernels are compiled for (lowering/contract/matrix_units.py): `slicer.compile(..., bf16_units=)`.
    bf16_units: str = "auto"

    def arg_shape(self, index: int) -> tuple[int, ...]:
        """The global shape the caller gives argument `index` in (its type's shape is padded if uneven)."""
        return tuple(self.arg_shapes.get(index, self.values[self.args[index]].dist.shape))

    def result_shape(self, index: int) -> tuple[int, ...]:
        """The global shape result `index` is returned in (its type's shape is padded if uneven)."""
        return tuple(self.result_shapes.get(index, self.result_dists[index].shape))

    # -- serialisation -----------------------------------------------------------------------------------
    def to_json(self) -> str:
        """The graph as JSON (what ranks load, `from_json`), made once: a built graph is never changed, and a
        session switching programs keys them by this text (`runtime.state.loaded_programs`)."""
        return self._json

    @cached_property
    def _json(self) -> str:
        def value(v: Value) -> dict:
            return {"local_shape": list(v.local_shape), "dtype": v.dtype, "dist": str(v.dist),
                    "shape": list(v.dist.shape), "varying": list(v.varying), "loc": v.loc}

        def node(n) -> dict:
            if isinstance(n, KernelNode):
                return {"kind": "kernel", "name": n.name, "inputs": list(n.inputs), "outputs": list(n.outputs),
                        "needs_coords": n.needs_coords}
            return {"kind": "collective", "op": n.op, "fields": n.step.fields(), "input": n.input, "output": n.output}

        return json.dumps({
            "entry": self.entry, "mesh": str(self.mesh), "args": list(self.args), "results": list(self.results),
            "result_sources": list(self.result_sources),
            "result_dists": [[str(d), list(d.shape)] for d in self.result_dists],
            "values": {name: value(v) for name, v in self.values.items()},
            "nodes": [node(n) for n in self.nodes], "kernels_mlir": self.kernels_mlir,
            "arg_shapes": {str(i): list(s) for i, s in self.arg_shapes.items()},
            "result_shapes": {str(i): list(s) for i, s in self.result_shapes.items()},
            "bf16_units": self.bf16_units,
        }, indent=1)

    @staticmethod
    def from_json(text: str) -> KernelGraph:
        data = json.loads(text)
        mesh = Mesh.parse(data["mesh"])
        values = {}
        for name, v in data["values"].items():
            dist = DistType.parse(v["dist"], tuple(v["shape"]), mesh)
            values[name] = Value(name, tuple(v["local_shape"]), v["dtype"], dist, tuple(v.get("varying", ())),
                                 v.get("loc", ""))
        nodes: list[KernelNode | CollectiveNode] = []
        for n in data["nodes"]:
            if n["kind"] == "kernel":
                nodes.append(KernelNode(n["name"], tuple(n["inputs"]), tuple(n["outputs"]), n["needs_coords"]))
            else:
                step = step_from_fields(n["op"], n["fields"], values[n["output"]].dist)
                nodes.append(CollectiveNode(n["op"], step, n["input"], n["output"]))
        result_dists = tuple(DistType.parse(text, tuple(shape), mesh) for text, shape in data["result_dists"])
        shapes = {key: {int(i): tuple(s) for i,
                        s in data.get(key, {}).items()} for key in ("arg_shapes", "result_shapes")}
        return KernelGraph(data["entry"], mesh, values, tuple(data["args"]), tuple(data["results"]),
                           tuple(data["result_sources"]), result_dists, nodes, data["kernels_mlir"], **shapes,
                           bf16_units=data.get("bf16_units", "auto"))

    # -- memory ------------------------------------------------------------------------------------------
    def value_bytes(self, name: str) -> int:
        """Bytes of one device's block of value `name`."""
        return self.values[name].nbytes

    def last_uses(self) -> dict[str, int]:
        """Per value, the index of the last node that reads it (results: `len(nodes)`, they stay to the end).
        Values no node reads and no result is are absent: they die where they are produced."""
        last_use = {name: len(self.nodes) for name in self.results}
        for index, node in enumerate(self.nodes):
            for name in ((node.input,) if isinstance(node, CollectiveNode) else node.inputs):
                last_use[name] = max(last_use.get(name, index), index)
        return last_use

    def live_bytes_per_node(self) -> list[tuple[str, int]]:
        """Bytes one device holds at the start (its argument blocks) and during each node, as
        `[("arguments", bytes), (node label, bytes), ...]`.

        A value is live from the node producing it (arguments: from the start) to its last use; results
        stay live to the end. A node's inputs and outputs are live together while it runs (a collective
        holds its input and output block). Scratch memory inside a kernel or a collective is not counted."""
        last_use = self.last_uses()
        live = {name: self.value_bytes(name) for name in self.args}
        timeline = [("arguments", sum(live.values()))]
        for index, node in enumerate(self.nodes):
            for name in ((node.output,) if isinstance(node, CollectiveNode) else node.outputs):
                live[name] = self.value_bytes(name)
            timeline.append((node.op if isinstance(node, CollectiveNode) else node.name, sum(live.values())))
            for name in [n for n in live if last_use.get(n, -1) <= index]:
                del live[name]
        return timeline

    def peak_bytes_per_device(self) -> tuple[int, str]:
        """The largest number of bytes a device holds at once between or during nodes, and when (the liveness
        count of `live_bytes_per_node`)."""
        timeline = self.live_bytes_per_node()
        index = max(range(len(timeline)), key=lambda i: (timeline[i][1], -i))
        return timeline[index][1], "at the start (arguments)" if index == 0 else f"during {timeline[index][0]}"

    def largest_value(self) -> tuple[str, int]:
        """The value with the largest per-device block, and its bytes."""
        name = max(self.values, key=self.value_bytes)
        return name, self.value_bytes(name)

    def __str__(self) -> str:
        lines = [f"kernel graph of @{self.entry} on mesh {self.mesh}"]
        for i, name in enumerate(self.args):
            logical = f" (logical {list(self.arg_shapes[i])}: padded blocks)" if i in self.arg_shapes else ""
            lines.append(f"  arg {name}: {self._describe(name)}{logical}")
        for n in self.nodes:
            if isinstance(n, KernelNode):
                coords = " + device coordinate" if n.needs_coords else ""
                lines.append(f"  kernel {n.name}({', '.join(n.inputs)}{coords}) -> {', '.join(n.outputs) or '()'}")
            else:
                lines.append(f"  {n.op} {n.input} -> {n.output}: {self._describe(n.output)}  {n.step.fields()}")
        for i, (name, dist, source) in enumerate(zip(self.results, self.result_dists, self.result_sources)):
            logical = f", logical {list(self.result_shapes[i])}: padded blocks" if i in self.result_shapes else ""
            lines.append(f"  result {name}: {dist} ({source}{logical})")
        return "\n".join(lines)

    def _describe(self, name: str) -> str:
        v = self.values[name]
        return f"{v.dtype}{list(v.local_shape)} local of {list(v.dist.shape)} {v.dist}"
