"""Packing: the A and B sides of a contraction copied into contiguous panels the micro-kernel streams.

`Ap[tile][k][MR]` and `Bp[panel][k][NR]` hold each side's product (`f_A`, `f_B`: the side's body ops
re-emitted, e.g. a softmax division or a scale) for one cache block, zero padded past the edges. Inputs
are read with vector loads where the lane dim is contiguous (B along N, A along M), with vector loads
along K transposed in registers where they are contiguous along K (A[m, k], B[n, k]), and with scalar
loads otherwise, so any operand layout packs into the same panels, as IREE's data tiling does.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, linalg

from slicer.core.errors import InternalError
from slicer.core.names import DIM_ATTR

from ..body import emit_op
from ..emitter import Index
from .analysis import Side
from .blocking import Block, Blocking, Loops


class Packer(Loops):
    """Loads of the inputs, the sides' values at a point, and the packing loops of one contraction."""

    # -- expressions -------------------------------------------------------------------------------
    def load_input(self, index: int, point: dict[int, Index], lane_dim: int | None, width: int) -> str:
        """Input `index` at `point` (loop dim -> element index): a vector of `width` along `lane_dim` if given."""
        e = self.e
        operand = self.c.inputs[index]
        coords = e.indices(point[d] for d in operand.dims)
        elem = str(operand.type.element_type)
        if lane_dim is None or operand.stride_of(lane_dim) is None:
            scalar = e.value(f"memref.load {self.args[index]}[{coords}] : {operand.type_text}")
            if lane_dim is None:
                return scalar
            return e.value(f"vector.broadcast {scalar} : {elem} to vector<{width}x{elem}>")
        return e.value(f"vector.load {self.args[index]}[{coords}] : {operand.type_text}, vector<{width}x{elem}>")

    def side_value(self, side: Side, point: dict[int, Index], lane_dim: int | None, width: int | None = None) -> str:
        """The side's product at `point`, re-emitting its body ops (vectors of `width`, default a full
        register, along lane_dim if given)."""
        e = self.e
        c = self.c
        width = width or self.lanes
        env: dict = {}
        for i in side.inputs:
            env[c.block_args[i]] = self.load_input(i, point, lane_dim, width)
        for value, name in zip(c.captured, self.cap):
            if lane_dim is None:
                env[value] = name
            else:
                env[value] = e.value(f"vector.broadcast {name} : {value.type} to vector<{width}x{value.type}>")
        for op in side.ops:
            if op.name == linalg.IndexOp.OPERATION_NAME:
                env[op.results[0]] = self.loop_index(ir.IntegerAttr(op.attributes[DIM_ATTR]).value, point,
                                                     lane_dim, width)
                continue
            env[op.results[0]] = emit_op(e, op, env, width if lane_dim is not None else None)
        total = None
        vtype = f"vector<{width}x{self.t}>" if lane_dim is not None else self.t
        for f in side.factors:
            v = env[f]
            total = v if total is None else e.value(f"arith.mulf {total}, {v} : {vtype}")
        if total is None:
            raise InternalError("a contraction side without factors (analysis gives each side at least one)")
        return total

    def loop_index(self, dim: int, point: dict[int, Index], lane_dim: int | None, width: int) -> str:
        """`linalg.index dim` at `point` (a side's mask of a padded dim): the index, or a vector of `width`
        consecutive ones along `lane_dim` (the same one broadcast along another dim)."""
        e = self.e
        scalar = e.idx(point[dim])
        if lane_dim is None:
            return scalar
        vector = e.value(f"vector.broadcast {scalar} : index to vector<{width}xindex>")
        if dim != lane_dim:
            return vector
        return e.value(f"arith.addi {vector}, {e.value(f'vector.step : vector<{width}xindex>')} : "
                       f"vector<{width}xindex>")

    def vectorizable(self, side: Side, lane_dim: int) -> bool:
        for i in side.inputs:
            operand = self.c.inputs[i]
            if operand.stride_of(lane_dim) is not None and not operand.contiguous_along(lane_dim):
                return False
        for v in self.c.captured:
            if not isinstance(v.type, (ir.F32Type, ir.F64Type, ir.IndexType)):
                return False
        for op in side.ops:  # index arithmetic in vectors: only the comparisons of a padded dim's mask
            if op.name == linalg.IndexOp.OPERATION_NAME:
                continue
            if any(isinstance(r.type, ir.IndexType) for r in op.results) or (
                    any(isinstance(o.type, ir.IndexType) for o in op.operands)
                    and op.name != arith.CmpIOp.OPERATION_NAME):
                return False
        return True

    # -- packing -----------------------------------------------------------------------------------
    def transposable(self, side: Side, regs: int) -> bool:
        """Whether the side can be read as vectors along K0 and transposed in registers into panels."""
        k0 = self.kb.dims[-1]
        group = min(regs, self.lanes)
        if group & (group - 1) or regs % group:
            return False
        return self.vectorizable(side, k0) and self.steppable(self.kb, self.lanes)

    def transposed_rows(self, side: Side, point0: dict, lane_dim: int, k0: int, kdims: dict, klin: Index,
                        base: Index, regs: int, buffer: str, rows: int) -> None:
        """Pack `regs` rows x L k's: vector loads along K0, a perfect-shuffle transpose, L contiguous stores. Only
        the first `rows` rows are loaded: the others are zeros (a panel narrower than the tile).

        Rows go in groups of G = min(regs, L); log2(G) stages pair vector i with i + G/2 and interleave
        lane by lane (`vector.shuffle`, one vpermt2ps each); afterwards vector j holds the k-major chunk j
        of the group's (k, row) block (checked symbolically below).
        """
        e = self.e
        lanes = self.lanes
        group = min(regs, lanes)
        for g in range(regs // group):
            vectors = []
            for r in range(group):
                if g * group + r >= rows:
                    vectors.append(e.value(f"arith.constant dense<0.0> : {self.vt}"))
                    continue
                point = {**point0, **kdims}
                point[lane_dim] = e.add(point0[lane_dim], g * group + r)
                vectors.append(self.side_value(side, point, k0))
            labels = [[(r, k) for k in range(lanes)] for r in range(group)]
            half = group // 2
            lo_idx = [v for j in range(lanes // 2) for v in (j, lanes + j)]
            hi_idx = [v for j in range(lanes // 2, lanes) for v in (j, lanes + j)]
            for _ in range(group.bit_length() - 1):  # log2(group) stages
                # every slot is filled below: 2 * half == group
                new: list[str] = [""] * group
                new_labels: list[list[tuple[int, int]]] = [[] for _ in range(group)]
                for i in range(half):
                    for slot, idx in ((2 * i, lo_idx), (2 * i + 1, hi_idx)):
                        both = labels[i] + labels[i + half]
                        new_labels[slot] = [both[j] for j in idx]
                        new[slot] = e.value(f"vector.shuffle {vectors[i]}, {vectors[i + half]} "
                                            f"[{', '.join(map(str, idx))}] : {self.vt}, {self.vt}")
                vectors, labels = new, new_labels
            assert _is_k_major(labels, group, lanes), "transpose network"
            for j, vector in enumerate(vectors):
                k_offset = (j * lanes) // group
                offset = e.add(e.add(base, e.mul(e.add(klin, k_offset), regs)), g * group)
                e.line(f"vector.store {vector}, {buffer}[{e.idx(offset)}] : memref<?x{self.t}>, {self.vt}")

    def pack(self, side: Side, group: Blocking, block: Block, kblock: Block, buffer: str, regs: int,
             fixed_dims: dict[int, Index]) -> None:
        """buffer[unit][k][regs] = side value; lanes past the group's edge are zero.

        Three ways, fastest first: vectors along the group's innermost dim when the side's inputs are
        contiguous along it (B[k, n] row-major); vectors along K0 transposed in registers when they are
        contiguous along K0 (A[m, k] row-major, B[n, k]); scalar loads otherwise and for edge tiles of a width
        known only at run time. A panel of a static width below `regs` loads its rows only (`fast_path`): reading
        the whole panel would read past the operand.
        """
        e = self.e
        lane_dim = group.dims[-1]
        # Vectors of a whole register, or of the tile's width when it is narrower (A's 8 rows in f32).
        vwidth = self.lanes if regs % self.lanes == 0 else regs if self.lanes % regs == 0 else 0
        vector = bool(vwidth) and self.vectorizable(side, lane_dim)
        transposed = not vector and self.transposable(side, regs)
        kc = e.mul(kblock.length, self.kb.inner)
        zero = e.value(f"arith.constant 0.0 : {self.t}")

        def unit_body(linear, dims, width):
            base = e.mul(linear, e.mul(kc, regs))
            point0 = {**fixed_dims, **dims}

            def vector_path(chunks: int):  # the first `chunks` vectors of each k row; zeros past them
                def k_body(klin, kdims, _):
                    for v in range(regs // vwidth):
                        offset = e.add(e.add(base, e.mul(klin, regs)), v * vwidth)
                        if v >= chunks:  # past a narrower panel's edge: zeros
                            value = e.value(f"arith.constant dense<0.0> : vector<{vwidth}x{self.t}>")
                        else:
                            point = {**point0, **kdims, lane_dim: e.add(dims[lane_dim], v * vwidth)}
                            value = self.side_value(side, point, lane_dim, vwidth)
                        e.line(f"vector.store {value}, {buffer}[{e.idx(offset)}] : memref<?x{self.t}>, "
                               f"vector<{vwidth}x{self.t}>")
                self.enumerate(self.kb, kblock, k_body)

            def scalar_path(count: Index):
                with e.loop(0, count) as lane:
                    def k_body(klin, kdims, _):
                        point = {**point0, **kdims}
                        point[lane_dim] = e.add(dims[lane_dim], lane)
                        value = self.side_value(side, point, None)
                        offset = e.add(e.add(base, e.mul(klin, regs)), lane)
                        e.line(f"memref.store {value}, {buffer}[{e.idx(offset)}] : memref<?x{self.t}>")
                    self.enumerate(self.kb, kblock, k_body)
                if count != regs:
                    with e.loop(count, regs) as lane:
                        def z_body(klin, kdims, _):
                            offset = e.add(e.add(base, e.mul(klin, regs)), lane)
                            e.line(f"memref.store {zero}, {buffer}[{e.idx(offset)}] : memref<?x{self.t}>")
                        self.enumerate(self.kb, kblock, z_body)

            def transposed_path(rows: int):
                k0 = self.kb.dims[-1]

                def k_body(klin, kdims, _):
                    self.transposed_rows(side, point0, lane_dim, k0, kdims, klin, base, regs, buffer, rows)
                self.enumerate(self.kb, kblock, k_body, step=self.lanes)

            def fast_path(rows: int):
                """The panel's first `rows` rows (all: `regs`) the fastest way the layout allows, zeros past them:
                loading whole panels of a narrower one read past the operand (a 3-class linear layer's 3 weight
                rows read as 32, which faulted where the memory after the weight was not mapped)."""
                if transposed:
                    transposed_path(rows)
                elif vector and rows % vwidth == 0:
                    vector_path(rows // vwidth)
                else:
                    scalar_path(rows)

            if isinstance(width, int):
                fast_path(width)
            else:  # the last panel's width is known at run time: the narrower one packs row by row
                then, otherwise = e.if_else(e.cmp("eq", width, regs))
                with then:
                    fast_path(regs)
                with otherwise:
                    scalar_path(width)

        self.enumerate(group, block, unit_body)


def _is_k_major(labels: list[list[tuple[int, int]]], group: int, lanes: int) -> bool:
    """Whether vector j holds the k-major linear chunk j (element (r, k) at k * group + r)."""
    for j, vector in enumerate(labels):
        if [k * group + r for r, k in vector] != list(range(j * lanes, (j + 1) * lanes)):
            return False
    return True

