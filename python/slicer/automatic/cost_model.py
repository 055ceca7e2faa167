"""What a tiling of the arguments costs: a model of propagation and partitioning over the `Sketch` (each op's
share in `op_partition.py`), priced with this machine's kernel and collective figures.

Time: each op's FLOPs at the contraction or vector rate, or the bytes it moves at the memory bandwidth, whichever
is slower, on the device's block of its loop nest; collectives at `CostModel.seconds` with each step's
busiest-device count, started as soon as their input exists and waited for where they are used, overlapping the
kernels in between up to `Machine.overlap`. Memory: as the kernel graph counts it (`peak_memory.py`). The model
in full: docs/tactics.md, "Automatic partitioning".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from slicer.core.mesh import Mesh
from slicer.redistribution.costs import CostModel
from slicer.redistribution.steps import STEP_TYPES, AllGather, AllReduce, ReduceScatter
from slicer.spmd.bucketing import bucket_bytes

from .cache_reads import CacheClock
from .machine import Machine
from .op_partition import partition_op
from .peak_memory import MemoryTrace
from .sketch import FREE_OPS, INSERT_SLICE, VIEW_OPS, OpSketch, Sketch
from .value_uses import copy_reads, last_uses, view_readers, view_roots

Tiling = tuple[tuple[str, ...], ...]  # per dim: the axes tiling it, major to minor


@dataclass(frozen=True)
class ModelledCollective:
    """One collective the model expects: its kind, axes, bytes the busiest device receives, time, the op."""

    kind: str
    axes: tuple[str, ...]
    busiest_bytes: int
    seconds: float
    where: str


@dataclass
class Estimate:
    """Predicted seconds (compute, communication exposed and overlapped) and peak bytes per device."""

    compute: float = 0.0
    exposed: float = 0.0
    overlapped: float = 0.0
    peak_bytes: int = 0
    collectives: list[ModelledCollective] | None = field(default_factory=list)  # None: not kept (`figures`)

    @property
    def total(self) -> float:
        return self.compute + self.exposed

    def figures(self) -> Estimate:
        """The figures alone, its collectives not kept (None): what the search ranks tilings by, and what a
        forked search process sends back (`parallel.run_tasks`; hundreds of collectives per tiling)."""
        return replace(self, collectives=None)


def wait_for(est: Estimate, machine: Machine, posted: float, run, transfer: float, bucketed: bool = False) -> float:
    """A collective posted at `posted` (when its input exists: the runtime starts it then, but at most one kernel ahead
    of its place, `runtime/execution/executor.py`: not before `run.gate`) and waited for at `run.clock`, its transfer
    on the serial link `run.link` (advanced): the seconds the rank waits, added to `est` (exposed; the rest of its cost
    overlapped). The other ranks post it up to `machine.sync_seconds` later (they drift apart), so the transfer
    begins then; a collective posted well before it is needed (a prefetched all_gather of a parameter) hides that
    lag, one waited for right away does not. The rank's own work on it (`machine.collective_seconds`: packing,
    issuing) is never hidden; it runs while the others catch up, and the rank then waits for what is left of the
    transfer, at least `1 - machine.overlap` of it (the rest hides behind kernels). This is how
    `graph_cost.price_graph` prices a compiled program's collectives (the figures of `Machine` were fitted there),
    so the search ranks tilings as the compiled programs are ranked: waiting for the lag and then doing the rank's
    work priced every collective used at once above its compiled price. A bucket's later members ride along: no
    lag, no work of their own."""
    lag, cpu = (0.0, 0.0) if bucketed else (machine.sync_seconds, machine.collective_seconds)
    start = max(max(posted, run.gate) + lag, run.link)
    run.link = start + transfer
    waited = max(run.link - run.clock - cpu, (1 - machine.overlap) * transfer, 0.0)
    est.exposed += cpu + waited
    est.overlapped += max(0.0, transfer + lag - waited)
    return cpu + waited


class Evaluator:
    """Prices tilings of one sketch's arguments on one mesh (see the module docstring)."""

    def __init__(self, sketch: Sketch, mesh: Mesh, comm: CostModel | None = None, machine: Machine | None = None,
                 follow: dict[int, int] | None = None):
        self.sketch, self.mesh = sketch, mesh
        self.comm = (comm or CostModel.default()).for_mesh(mesh)  # an axis across hosts: the network's figures
        self.machine = machine or Machine.default()
        self.follow = follow or {}  # result index -> the argument whose tiling it leaves in
        self.root = view_roots(sketch)  # a view's result -> the value whose bytes it shares
        self.last_use = last_uses(sketch, self.root)
        self.bucket_limit = bucket_bytes(self.comm)
        self._groups: dict = {(): 1}
        self._nbytes = [sketch.nbytes(v) for v in range(len(sketch.shapes))]
        self._local: dict = {}
        self._priced: dict = {}  # a collective's figures by (kind, axes, local bytes, bucketed)
        self._orders: dict = {}
        self._shapes: dict = {}  # (op index, its operands' states) -> `op_partition.partition_op`
        # A value's state (tiling, priority, partial axes) as a small number, so that an op's key is a tuple of
        # numbers, not of nested tuples of axis names hashed at every read; each value starts replicated.
        self._state_ids: dict[tuple, int] = {}
        self.replicated = {v: ((),) * len(shape) for v, shape in enumerate(sketch.shapes)}
        self.default_states = {v: self.state_id(tiling, 0, None) for v, tiling in self.replicated.items()}
        # Per op, read once for the thousands of evaluations: each operand's root (-1 for none) and whether the
        # op is a view (it makes no fill).
        self.op_roots = [tuple(self.root.get(v, v) if v >= 0 else -1 for v in op.operands) for op in sketch.ops]
        self.op_views = [op.name in VIEW_OPS for op in sketch.ops]
        self.view_readers = view_readers(sketch, self.op_views)
        # The bytes each op reads whole (replicated), and which values are made in place (cheap: empty tensors,
        # constants and their fills), never read from memory.
        self.cheap_values = {v for op in sketch.ops if op.cheap for v in op.results if v >= 0}
        self.op_read = [[self._nbytes[v] if v >= 0 and v not in self.cheap_values else 0 for v in op.operands]
                        for op in sketch.ops]
        # Each value's last reading op (a view's reads counted for its root): a value is stored between kernels
        # when that op is in a later kernel than the one making it (kernels are numbered in op order).
        self.last_reader = {r: index for index, roots in enumerate(self.op_roots) for r in roots if r >= 0}
        self.copy_until = copy_reads(sketch, self.op_roots)

    def group(self, axes) -> int:
        found = self._groups.get(axes)
        if found is None:
            found = self._groups[axes] = self.mesh.group_size(axes)
        return found

    def state_id(self, tiling: Tiling, prio: int, partial) -> int:
        """The number of a value's state: its tiling, priority and partial axes (None: never set)."""
        key = (tiling, prio, partial)
        found = self._state_ids.get(key)
        if found is None:
            found = self._state_ids[key] = len(self._state_ids)
        return found

    def local_bytes(self, value: int, tiling: Tiling) -> int:
        key = (value, tiling)
        found = self._local.get(key)
        if found is None:
            found = self._local[key] = self._nbytes[value] // max(1, math.prod(self.group(a) for a in tiling))
        return found

    def _collective(self, est: Estimate, kind, axes, local: int, where: str, bucketed: bool = False) -> float:
        """Record one collective; return its transfer seconds (alpha/beta; a member of a bucket: beta only). Its
        recorded cost adds, unless bucketed, the machine's `sync_seconds` and `collective_seconds`."""
        key = (kind, axes, local, bucketed)
        found = self._priced.get(key)
        if found is None:
            found = self._priced[key] = self._price_collective(kind, axes, local, bucketed)
        if found[0] is None:
            return 0.0
        ordered, busiest, seconds, extra = found
        est.collectives.append(ModelledCollective(kind, ordered, busiest, seconds + extra, where))
        return seconds

    def _price_collective(self, kind, axes, local: int, bucketed: bool) -> tuple:
        """(axes in mesh order, the busiest device's bytes, transfer seconds, the machine's extra seconds) of one
        collective (see `_collective`), or (None,) for a group of one device (no collective)."""
        k = self.group(axes)
        if k <= 1:
            return (None,)
        step = {"all_gather": AllGather, "all_reduce": AllReduce, "reduce_scatter": ReduceScatter}[kind]
        busiest = step.busiest(k, local)
        ordered = self.mesh_order(axes)
        seconds = self.comm.seconds(ordered, busiest)
        if bucketed:
            seconds -= self.comm.seconds(ordered, 0)
        extra = 0.0 if bucketed else self.machine.sync_seconds + self.machine.collective_seconds
        return ordered, busiest, seconds, extra

    def mesh_order(self, axes) -> tuple[str, ...]:
        """`axes` (any order, a set) in the mesh's order."""
        found = self._orders.get(axes)
        if found is None:
            found = self._orders[axes] = _mesh_order(self.mesh, axes)
        return found

    def evaluate(self, tilings: tuple[Tiling, ...]) -> Estimate:
        """The estimate of the program with argument `i` laid out as `tilings[i]`."""
        run = _Run(self, tilings)
        for index, op in enumerate(self.sketch.ops):
            run.op(index, op)
        run.finish()
        run.est.compute += self.machine.run_seconds + self.machine.kernel_seconds * run.memory.kernels
        return run.est


class _Run:
    """One evaluation: each value's tiling, partial axes and priority; the clock, the link and live bytes."""

    def __init__(self, ev: Evaluator, tilings: tuple[Tiling, ...]):
        self.ev, self.est = ev, Estimate()
        sk = ev.sketch
        n = sk.num_args
        args = tuple(tilings[:n]) + tuple(ev.replicated[i] for i in range(len(tilings), n))
        self.tiling: dict[int, Tiling] = dict(ev.replicated)
        self.tiling.update(enumerate(args))
        # values tiled or partial: the others take the fast path
        self.distributed: set[int] = {i for i, tiling in enumerate(args) if any(tiling)}
        self.partial: dict[int, frozenset[str]] = dict.fromkeys(range(n), frozenset())
        self.prio: dict[int, int] = {i: i for i in range(n)}
        self.ready: dict[int, float] = dict.fromkeys(range(n), 0.0)
        self.state: dict[int, int] = dict(ev.default_states)  # each value's `Evaluator.state_id`
        empty = frozenset()
        self.state.update((i, ev.state_id(tiling, i, empty)) for i, tiling in enumerate(args))
        self.memory = MemoryTrace(len(sk.ops), ev.bucket_limit)
        argument_bytes = [ev.local_bytes(i, tiling) for i, tiling in enumerate(args)]
        self.memory.arguments(argument_bytes)
        self.cache = CacheClock.of(ev.machine, sum(argument_bytes))
        self.clock = self.link = 0.0
        self.gathered: dict = {}  # (value, dim) gathered -> its copy in the memory trace (-1: a partial copy)
        self.fills: dict[int, tuple[OpSketch, int]] = {}  # a fill's value not yet read -> (its op, its bytes)
        # the open bucket per (kind, axes), as the clock prices it: the op reading its first member, its bytes
        self.buckets: dict[tuple, tuple[int, int]] = {}
        self.at = 0  # the op being priced
        # when the current kernel began (its first op): a collective after it starts no earlier (`wait_for`)
        self.gate, self.gate_kernel = 0.0, 0

    def lay(self, v: int) -> Tiling:
        return self.tiling[v]

    def communicate(self, v: int, kind: str, axes, local: int, where: str, bucketable: bool = False) -> None:
        """A collective of value `v`: started when `v` is ready and the link free, waited for now. All_reduces
        (reduce_scatters of dim 0: `bucketable`) of whole blocks, not scalars, computed earlier join the open
        bucket of their kind and axes up to the bucket size, as `spmd/bucketing.py` combines them (one latency and
        one meeting of the ranks per bucket; collectives of other kinds in between do not close it), if made
        before the bucket's first member is read: the bucket's collective runs after its last member is made. The
        clock prices the buckets so, in the order their members are read; the memory trace forms them as the compiled
        program does, in the order the members are made (`MemoryTrace.buckets`), which places their collectives."""
        key = (kind, tuple(axes))
        made = self.memory.born.get(v, (-1,))[0]
        join = bucketable and self.ev.sketch.shapes[v] != () and not any(self.lay(v)) and \
            self.ready.get(v, 0.0) < self.clock
        bucket = self.buckets.get(key) if join else None
        bucketed = bucket is not None and made < bucket[0] and bucket[1] + local <= self.ev.bucket_limit
        transfer = self.ev._collective(self.est, kind, axes, local, where, bucketed)
        if transfer <= 0:
            return
        if join:  # the memory trace packs the buckets as the compiled program does, in the order they are made
            result = STEP_TYPES[kind].local_after(self.ev.group(axes), local)
            self.memory.bucket_member(key, v, made, local, result, self.at)
        else:  # a collective of its own, before its reader
            self.memory.boundary()
        if bucketed:
            self.buckets[key] = (bucket[0], bucket[1] + local)
        elif join:
            self.buckets[key] = (self.at, local)
        self.clock += wait_for(self.est, self.ev.machine, self.ready.get(v, 0.0), self, transfer, bucketed)

    def op(self, index: int, op: OpSketch) -> None:
        ev = self.ev
        operands = op.operands
        self.at = index
        if self.memory.kernel != self.gate_kernel:
            self.gate, self.gate_kernel = self.clock, self.memory.kernel
        if self.distributed.isdisjoint(operands):
            self.replicated_op(index, op)
            return
        tiling, prio, partial, state = self.tiling, self.prio, self.partial, self.state
        # A view of partial sums read by an op tiled over some axes: propagation takes the view into that op's loop
        # nest, which slices the partial sums themselves, so they are reduced there (FSDP's weight gradients, each
        # reshaped from its per-head tiling, are reduced at the optimizer's update of the weight's shard, not in the
        # backward pass); read by ops computed whole, the view is one of them and reduces its operand.
        through = ev.op_views[index] and bool(partial.get(operands[0])) and self.tiled_reader(index)
        key = (index, through, *[state[v] if v >= 0 else -1 for v in operands])
        shape = ev._shapes.get(key)
        if shape is None:
            shape = ev._shapes[key] = partition_op(ev, op, tiling, prio, self.partial, through)
        gathers, gathered_operands, reductions, fill_divides, result_prio, reduced, results, work = shape
        roots = ev.op_roots[index]
        if gathers:
            for v, d, axes, local, held, whole in gathers:
                copy = self.gathered.get((v, d))
                if copy is None:
                    self.communicate(v, "all_gather", axes, local, op.line)
                    # the gathered copy serves every later op that reads the value gathered (a weight's forward and
                    # backward): it lives till the last of those; a partly gathered one (the first of two dims) only
                    # until the next all_gather, between kernels, which the trace does not count (test_gathers.py)
                    until = max(index, ev.copy_until.get(ev.root.get(v, v), index))
                    self.gathered[(v, d)] = self.memory.hold(index, until, held) if whole else -1
                elif copy >= 0:
                    self.memory.read_held(copy, index)
            self.read_by_gathers(index, gathered_operands, roots)
        fills = self.fills if not ev.op_views[index] else ()
        if reductions:
            for k, v in enumerate(operands):
                reduction = reductions[k]
                if reduction is not None and partial.get(v):  # (not when an earlier operand was the same value)
                    self.communicate(v, *reduction[:3], op.line, bucketable=reduction[3])
                    partial[v] = frozenset()
                    state[v] = ev.state_id(tiling[v], prio.get(v, 0), partial[v])
                if roots[k] in fills:
                    self.make_fill(roots[k], fill_divides[k])
        elif fills:
            for k, r in enumerate(roots):
                if r in fills:
                    self.make_fill(r, fill_divides[k])
        # the copies its collectives made for it (gathered, reduced) are in cache
        fresh = gathered_operands | {k for k, reduction in enumerate(reductions) if reduction is not None}
        seconds = self.op_seconds(index, op, *work, fresh)
        memory = self.memory
        memory.op_kernel[index] = memory.kernel
        for v, result, nbytes, distributed, result_state in results:
            tiling[v], prio[v], state[v] = result, result_prio, result_state
            partial[v] = reduced
            if distributed:
                self.distributed.add(v)
            memory.produce(index, v, nbytes)
        self.made(index, op, results)
        self.spend(seconds)
        if op.flops and not op.cheap:
            memory.computed()
        ready, clock = self.ready, self.clock
        for v, *_ in results:
            ready[v] = clock

    def tiled_reader(self, index: int) -> bool:
        """A reader of view `index`'s result (through further views) has an operand already tiled: an argument's
        block (a weight's shard under its update) or a value made before the view."""
        tiling = self.tiling
        return any(u >= 0 and u in self.distributed and any(tiling[u])
                   for reader in self.ev.view_readers[index] for u in self.ev.sketch.ops[reader].operands)

    def read_by_gathers(self, index: int, gathered: set[int], roots: tuple[int, ...]) -> None:
        """Op `index` reads its operands `gathered` as gathered copies: a value it is the last reader of, read here
        only through them, is last read by the all_gathers before the op's kernel, and freed there (the kernel
        graph frees FSDP's shard of a weight at its all_gather, not after the op using the whole weight)."""
        for k in gathered:
            r = roots[k]
            if self.ev.last_use.get(r) == index and all(roots[j] != r or j in gathered for j in range(len(roots))):
                self.memory.read_until(r, index - 1)

    def replicated_op(self, index: int, op: OpSketch) -> None:
        """An op none of whose operands is tiled or partial: whole on every device, no collective."""
        memory, ev = self.memory, self.ev
        memory.op_kernel[index] = memory.kernel
        fills = self.fills
        if fills and not ev.op_views[index]:
            for r in ev.op_roots[index]:
                if r in fills:
                    self.make_fill(r, 1)
        produced, made = 0, []
        for v in op.results:
            if v >= 0:
                nbytes = 0 if op.cheap or v in ev.root else ev._nbytes[v]
                memory.produce(index, v, nbytes)
                produced += nbytes
                made.append((v, None, nbytes))
                if op.fill:
                    self.fills[v] = (op, nbytes)
        if op.fill:
            return  # made (and priced) where it is first read, in that op's block
        seconds = self.op_seconds(index, op, 1, produced, ev.op_read[index])
        self.made(index, op, made)
        self.spend(seconds)
        if op.flops and not op.cheap:
            memory.computed()
        for v in op.results:
            if v >= 0:
                self.ready[v] = self.clock

    def make_fill(self, v: int, divide: int) -> None:
        """Fill `v` is first read by an op that walks it in blocks of 1/`divide`: the partitioner makes each
        device's block there (a fill has no data to keep whole), and the kernel graph makes it again in each kernel
        that reads it (a constant generic is re-materialised, `lowering/graph_builder.py`), into the buffer of the
        op it initialises: written at that size, never stored between kernels."""
        op, nbytes = self.fills.pop(v)
        self.memory.resize(v, 0)
        self.spend(op_seconds(self.ev.machine, op, divide, nbytes // divide, ()))
        if self.cache is not None:
            self.cache.made(v, nbytes // divide)

    def op_seconds(self, index: int, op: OpSketch, divide: int, produced: int, read, fresh=()) -> float | None:
        """`op_seconds` of op `index`, its reads from memory told by the cache clock (`cache_reads.py`); the
        operands `fresh` (positions) are copies made for it, in cache."""
        roots = self.ev.op_roots[index]
        if op.name in FREE_OPS:  # read in place: what reads the result reads the operand's bytes
            return None
        cold = 0
        if self.cache is not None:
            keys = [None if k in fresh or r < 0 else r for k, r in enumerate(roots)]
            cold = self.cache.read(keys, moved_reads(op, read))
        return op_seconds(self.ev.machine, op, divide, produced, read, cold)

    def made(self, index: int, op: OpSketch, results) -> None:
        """Op `index` stored `results` ((value, _, bytes per device) each): the cache clock's account; a slice read
        in place stands for its operand's bytes."""
        if self.cache is None:
            return
        if op.name in FREE_OPS:
            source = self.ev.op_roots[index][0]
            for v, *_ in results:
                self.cache.share(v, source)
            return
        for v, _, nbytes, *_ in results:
            self.cache.made(v, nbytes)

    def spend(self, seconds: float | None) -> None:
        """The rank computes for `seconds` (None: nothing to do)."""
        if seconds is not None:
            self.est.compute += seconds
            self.clock += seconds

    def finish(self) -> None:
        ev, sk = self.ev, self.ev.sketch
        self.at = len(sk.ops)
        for r, v in enumerate(sk.results):
            if v < 0:
                continue
            want = self.result_tiling(r, v)
            partial = self.partial.get(v, frozenset())
            if partial:
                axes = ev.mesh_order(partial)
                scatter = [d for d, w in enumerate(want) if set(w) == set(axes)]
                self.communicate(v, "reduce_scatter" if scatter else "all_reduce", axes,
                                 ev.local_bytes(v, self.lay(v)), "the results", bucketable=scatter[:1] in ([], [0]))
            for d, axes in enumerate(self.lay(v)):
                if axes and (d >= len(want) or want[d] != axes) and not partial:
                    self.communicate(v, "all_gather", axes, ev.local_bytes(v, self.lay(v)), "the results")
        self.est.peak_bytes = int(self.memory.peak(ev.last_use, sk.results, ev.last_reader))

    def result_tiling(self, r: int, v: int) -> Tiling:
        arg = self.ev.follow.get(r)
        if arg is None:
            return self.lay(v)  # a free result leaves as computed
        return self.lay(arg)


def op_seconds(machine: Machine, op: OpSketch, divide: int, produced: int, read, cold: int = 0) -> float | None:
    """Seconds of `op` walking 1/`divide` of its loop nest, reading `read` (bytes per operand; `cold` bytes of them
    from memory, `cache_reads.py`) and storing `produced` bytes; None when it does no work (a cheap op, a view or
    slice read in place, or one neither computing nor storing). An insert_slice moves its source's bytes only
    (`moved_reads`). The one rule for an op's time: the search's model and the compiled programs' price
    (`graph_cost.kernel_seconds`) both ask it."""
    if op.cheap or op.name in FREE_OPS or (not op.flops and not produced):
        return None
    read = moved_reads(op, read)
    if op.name == INSERT_SLICE:
        produced = sum(read)
    return machine.op_time(op.flops / divide, op.contraction, produced, sum(read), cold)


def moved_reads(op: OpSketch, read) -> list[int]:
    """Of `read` (bytes per operand), what `op` moves: an insert_slice its source's only (`sketch.INSERT_SLICE`:
    the destination is updated in place); what the cache clock counts and `op_seconds` charges."""
    return list(read[:1]) if op.name == INSERT_SLICE else list(read)


def _mesh_order(mesh: Mesh, axes) -> tuple[str, ...]:
    return tuple(a for a in mesh.axis_names if a in set(axes))
