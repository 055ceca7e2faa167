"""Measuring this machine's kernel figures (`slicer.automatic.Machine`) for `slicer-plan --calibrate kernels`.

Small programs of the kinds whole programs are made of are compiled by the real pipeline (`slicer.compile`) and run
on the machine's MPI ranks, one per core (what the search's programs do); their kernel graphs and median times go
to `automatic.machine_fit.fit_machine`, which finds the figures that price them as measured. The probes (sizes per
rank; the first dim is tiled over the ranks): docs/module-notes.md, `tools/machine_probes.py`.
"""

from __future__ import annotations

import statistics
import warnings
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from slicer.api import compile
from slicer.automatic.machine import Machine
from slicer.automatic.machine_fit import fit_machine, relative_errors
from slicer.core.host import host_cores
from slicer.core.mesh import Mesh
from slicer.lowering import KernelGraph
from slicer.redistribution.costs import CostModel
from slicer.runtime import launch_each
from slicer.runtime.jobs.resources import check_memory, check_ranks
from slicer.tactics import parse_tactics

CPU0 = Path("/sys/devices/system/cpu/cpu0")
"""Where Linux describes the first CPU's caches (`cache_share`)."""


@dataclass(frozen=True)
class Probe:
    """One probe program: its name, MLIR text (global shapes for `ranks` ranks), tactics, argument shapes, and
    whether it needs more than one rank (its point is a collective)."""

    name: str
    text: str
    tactics: str
    shapes: tuple[tuple[int, ...], ...]
    collective: bool = False


def _func(args: list[tuple[str, str]], result: str, body: str) -> str:
    signature = ", ".join(f"%{name}: {type_}" for name, type_ in args)
    return f"func.func @main({signature}) -> {result} {{\n{body}}}\n"


def _zeros(out: str, type_: str) -> str:
    """`out`, a zero tensor of `type_` (an empty tensor filled with %zero, which the body defines)."""
    return (f"  {out}_e = tensor.empty() : {type_}\n"
            f"  {out} = linalg.fill ins(%zero : f32) outs({out}_e : {type_}) -> {type_}\n")


def _matmul_op(out: str, a: str, a_type: str, b: str, b_type: str, c_type: str) -> str:
    """`out` = `a` @ `b`, accumulated into zeros (as the importer writes a matmul)."""
    return (_zeros(f"{out}_z", c_type)
            + f"  {out} = linalg.matmul ins({a}, {b} : {a_type}, {b_type}) outs({out}_z : {c_type}) -> {c_type}\n")


def _transpose_op(out: str, src: str, src_type: str, type_: str) -> str:
    """`out`, the 2-D `src` transposed."""
    return (f"  {out}_e = tensor.empty() : {type_}\n"
            f"  {out} = linalg.transpose ins({src} : {src_type}) outs({out}_e : {type_}) permutation = [1, 0]\n")


def _matmul(name: str, m: int, k: int, n: int, tactics: str, collective: bool = False) -> Probe:
    a, b, c = f"tensor<{m}x{k}xf32>", f"tensor<{k}x{n}xf32>", f"tensor<{m}x{n}xf32>"
    body = "  %zero = arith.constant 0.0 : f32\n" + _matmul_op("%r", "%a", a, "%b", b, c) + f"  return %r : {c}\n"
    return Probe(name, _func([("a", a), ("b", b)], c, body), tactics, ((m, k), (k, n)), collective)


def _generic(out: str, maps: list[str], iterators: list[str], ins: list[tuple[str, str]], init: tuple[str, str],
             body: list[str], result: str, dims: str = "(i, j)") -> str:
    """One linalg.generic assigning `out`: `ins` and `init` (value, type) with `maps` (the last for the init),
    `body` lines over block arguments %a0.. (inputs) and %acc (the init), yielding %y."""
    args = ", ".join([f"%a{k}: f32" for k in range(len(ins))] + ["%acc: f32"])
    maps_text = ", ".join(f"affine_map<{dims} -> {m}>" for m in maps)
    iterators_text = ", ".join(f'"{i}"' for i in iterators)
    lines = "".join(f"    {line}\n" for line in body)
    return (f"  {out} = linalg.generic {{indexing_maps = [{maps_text}], iterator_types = [{iterators_text}]}} "
            f"ins({', '.join(v for v, _ in ins)} : {', '.join(t for _, t in ins)}) outs({init[0]} : {init[1]}) {{\n"
            f"  ^bb0({args}):\n{lines}    linalg.yield %y : f32\n  }} -> {result}\n")


def _mlp(name: str, rows: int, d: int, hidden: int, tactics: str, collective: bool = False) -> Probe:
    """A transformer MLP as PyTorch's import writes it: each linear a transposed weight, a matmul into a zero
    accumulator and a broadcast bias; a tanh-GELU between (the mix of ops whole programs are made of)."""
    x, w1, b1, w2, b2 = (f"tensor<{rows}x{d}xf32>", f"tensor<{hidden}x{d}xf32>", f"tensor<{hidden}xf32>",
                         f"tensor<{d}x{hidden}xf32>", f"tensor<{d}xf32>")
    body = ["  %zero = arith.constant 0.0 : f32\n"]

    def linear(out, inp, in_type, weight, w_type, bias, b_type, k, n):
        t_type, r_type = f"tensor<{k}x{n}xf32>", f"tensor<{rows}x{n}xf32>"
        return (_transpose_op(f"%{out}_t", weight, w_type, t_type)
                + _matmul_op(f"%{out}_m", inp, in_type, f"%{out}_t", t_type, r_type)
                + f"  %{out}_e = tensor.empty() : {r_type}\n"
                + _generic(f"%{out}", ["(i, j)", "(j)", "(i, j)"], ["parallel", "parallel"],
                           [(f"%{out}_m", r_type), (bias, b_type)], (f"%{out}_e", r_type),
                           ["%y = arith.addf %a0, %a1 : f32"], r_type))

    h_type = f"tensor<{rows}x{hidden}xf32>"
    body.append(linear("h", "%x", x, "%w1", w1, "%b1", b1, d, hidden))
    body.append(_generic("%g", ["(i, j)", "(i, j)"], ["parallel", "parallel"], [("%h", h_type)], ("%h_e", h_type),
                         ["%c0 = arith.constant 0.044715 : f32", "%c1 = arith.constant 0.7978846 : f32",
                          "%half = arith.constant 0.5 : f32", "%one = arith.constant 1.0 : f32",
                          "%x2 = arith.mulf %a0, %a0 : f32", "%x3 = arith.mulf %x2, %a0 : f32",
                          "%s = arith.mulf %x3, %c0 : f32", "%u = arith.addf %a0, %s : f32",
                          "%w = arith.mulf %u, %c1 : f32", "%th = math.tanh %w : f32",
                          "%p = arith.addf %th, %one : f32", "%h2 = arith.mulf %a0, %half : f32",
                          "%y = arith.mulf %h2, %p : f32"], h_type))
    body.append(linear("o", "%g", h_type, "%w2", w2, "%b2", b2, hidden, d))
    body.append(f"  return %o : {x}\n")
    text = _func([("x", x), ("w1", w1), ("b1", b1), ("w2", w2), ("b2", b2)], x, "".join(body))
    return Probe(name, text, tactics, ((rows, d), (hidden, d), (hidden,), (d, hidden), (d,)), collective)


def _gathered_chain(name: str, rows: int, d: int, layers: int, tactics: str) -> Probe:
    """`layers` matmuls in a row, h = h @ W_i, each weight's columns tiled where the rows of h are: each weight is
    all_gathered before its matmul, while the previous one runs (the runtime starts a collective one kernel ahead),
    as FSDP gathers each layer's weights: many collectives, each partly hidden, where one probe's single
    collective costs its whole transfer and the ranks' drift."""
    h, w = f"tensor<{rows}x{d}xf32>", f"tensor<{d}x{d}xf32>"
    body = "  %zero = arith.constant 0.0 : f32\n"
    current = "%x"
    for i in range(layers):
        body += _matmul_op(f"%h{i}", current, h, f"%w{i}", w, h)
        current = f"%h{i}"
    body += f"  return {current} : {h}\n"
    args = [("x", h)] + [(f"w{i}", w) for i in range(layers)]
    return Probe(name, _func(args, h, body), tactics, ((rows, d),) + ((d, d),) * layers, True)


def _linear_backward(name: str, rows: int, d: int, hidden: int, tactics: str, collective: bool = False) -> Probe:
    """A linear layer's backward as a training step has it: the input's gradient (dy @ W), the weight's (dy^T @ x,
    a contraction over the rows: partial sums when the rows are tiled, all_reduced) and the bias's (dy's column
    sums, a reduction over the rows), then an Adam-like update of the weight (sqrt, division) by its gradient."""
    x, dy, w = f"tensor<{rows}x{d}xf32>", f"tensor<{rows}x{hidden}xf32>", f"tensor<{hidden}x{d}xf32>"
    dyt, b = f"tensor<{hidden}x{rows}xf32>", f"tensor<{hidden}xf32>"
    body = ("  %zero = arith.constant 0.0 : f32\n"
            + _matmul_op("%dx", "%dy", dy, "%w", w, x)
            + _transpose_op("%dyt", "%dy", dy, dyt)
            + _matmul_op("%dw", "%dyt", dyt, "%x", x, w)
            + _zeros("%bz", b) + f"  %we = tensor.empty() : {w}\n"
            + _generic("%db", ["(i, j)", "(j)"], ["reduction", "parallel"], [("%dy", dy)], ("%bz", b),
                       ["%y = arith.addf %acc, %a0 : f32"], b)
            + _generic("%nw", ["(i, j)", "(i, j)", "(i, j)"], ["parallel", "parallel"], [("%w", w), ("%dw", w)],
                       ("%we", w), ["%lr = arith.constant 1.0e-03 : f32", "%eps = arith.constant 1.0e-08 : f32",
                                    "%g2 = arith.mulf %a1, %a1 : f32", "%r = math.sqrt %g2 : f32",
                                    "%den = arith.addf %r, %eps : f32", "%q = arith.divf %a1, %den : f32",
                                    "%s = arith.mulf %q, %lr : f32", "%y = arith.subf %a0, %s : f32"], w)
            + f"  return %dx, %nw, %db : {x}, {w}, {b}\n")
    return Probe(name, _func([("x", x), ("dy", dy), ("w", w)], f"({x}, {w}, {b})", body), tactics,
                 ((rows, d), (rows, hidden), (hidden, d)), collective)


def _adam_update(suffix: str, t: str) -> str:
    """The three passes of one parameter's Adam update (its moments %m, %v and the parameter %p, each with
    `suffix`), from %p0, %g, %m0, %v0 (with `suffix`) of type `t`, into the empty tensor %e."""
    full, par = "(i, j)", ["parallel", "parallel"]

    def v(name: str) -> str:
        return f"%{name}{suffix}"

    return (_generic(v("m"), [full] * 3, par, [(v("m0"), t), (v("g"), t)], ("%e", t),
                     ["%b = arith.constant 0.9 : f32", "%c = arith.constant 0.1 : f32",
                      "%x = arith.mulf %a0, %b : f32", "%z = arith.mulf %a1, %c : f32",
                      "%y = arith.addf %x, %z : f32"], t)
            + _generic(v("v"), [full] * 3, par, [(v("v0"), t), (v("g"), t)], ("%e", t),
                       ["%b = arith.constant 0.999 : f32", "%c = arith.constant 0.001 : f32",
                        "%x = arith.mulf %a0, %b : f32", "%q = arith.mulf %a1, %a1 : f32",
                        "%z = arith.mulf %q, %c : f32", "%y = arith.addf %x, %z : f32"], t)
            + _generic(v("p"), [full] * 4, par, [(v("p0"), t), (v("m"), t), (v("v"), t)], ("%e", t),
                       ["%lr = arith.constant 1.0e-03 : f32", "%eps = arith.constant 1.0e-08 : f32",
                        "%r = math.sqrt %a2 : f32", "%d = arith.addf %r, %eps : f32",
                        "%u = arith.divf %a1, %d : f32", "%s = arith.mulf %u, %lr : f32",
                        "%y = arith.subf %a0, %s : f32"], t))


def _adam(name: str, rows: int, cols: int, count: int = 1) -> Probe:
    """An Adam update as an imported training step has it, of `count` parameters of rows x cols: the two moments
    and the parameter, each a pass over parameter-sized tensors reading two or three of them for the one it
    stores; memory-bound, as a training step's optimizer kernels are. One parameter in two sizes: one whose
    tensors stay in the caches from run to run (its seven tensors 3.5 MiB a rank), one past them (56 MiB a rank),
    as a training step's optimizer finds its parameters and moments after the forward and backward
    (`automatic/cache_reads.py`): the bandwidth of each kind of read. And many small parameters, as a model's
    biases and norms are: a kernel taking and returning hundreds of arrays (`Machine.array_seconds`)."""
    t = f"tensor<{rows}x{cols}xf32>"
    suffixes = [f"_{i}" if count > 1 else "" for i in range(count)]
    body = f"  %e = tensor.empty() : {t}\n" + "".join(_adam_update(s, t) for s in suffixes)
    results = [f"%{name}{s}" for s in suffixes for name in ("p", "m", "v")]
    body += f"  return {', '.join(results)} : {', '.join([t] * len(results))}\n"
    args = [(f"{name}{s}", t) for s in suffixes for name in ("p0", "g", "m0", "v0")]
    text = _func(args, f"({', '.join([t] * len(results))})", body)
    tactics = ";".join(f"arg{i}.0=x" for i in range(len(args)))
    return Probe(name, text, tactics, ((rows, cols),) * len(args))


def _norm_softmax(rows: int, cols: int) -> Probe:
    """A layer norm then a softmax over each row: row reductions (sums, a max), broadcasts, sqrt, exp, divisions."""
    t, r = f"tensor<{rows}x{cols}xf32>", f"tensor<{rows}xf32>"
    row, full, red, par = "(i)", "(i, j)", ["parallel", "reduction"], ["parallel", "parallel"]
    body = ("  %zero = arith.constant 0.0 : f32\n  %low = arith.constant -3.0e+38 : f32\n"
            f"  %re = tensor.empty() : {r}\n  %e = tensor.empty() : {t}\n"
            f"  %z = linalg.fill ins(%zero : f32) outs(%re : {r}) -> {r}\n"
            f"  %l = linalg.fill ins(%low : f32) outs(%re : {r}) -> {r}\n"
            + _generic("%sum", [full, row], red, [("%x", t)], ("%z", r), ["%y = arith.addf %acc, %a0 : f32"], r)
            + _generic("%c", [full, row, full], par, [("%x", t), ("%sum", r)], ("%e", t),
                       [f"%n = arith.constant {float(cols)} : f32", "%m = arith.divf %a1, %n : f32",
                        "%y = arith.subf %a0, %m : f32"], t)
            + _generic("%sq", [full, row], red, [("%c", t)], ("%z", r),
                       ["%q = arith.mulf %a0, %a0 : f32", "%y = arith.addf %acc, %q : f32"], r)
            + _generic("%n", [full, row, full], par, [("%c", t), ("%sq", r)], ("%e", t),
                       [f"%k = arith.constant {float(cols)} : f32", "%eps = arith.constant 1.0e-05 : f32",
                        "%v = arith.divf %a1, %k : f32", "%ve = arith.addf %v, %eps : f32",
                        "%sd = math.sqrt %ve : f32", "%y = arith.divf %a0, %sd : f32"], t)
            + _generic("%mx", [full, row], red, [("%n", t)], ("%l", r), ["%y = arith.maximumf %acc, %a0 : f32"], r)
            + _generic("%ex", [full, row, full], par, [("%n", t), ("%mx", r)], ("%e", t),
                       ["%d = arith.subf %a0, %a1 : f32", "%y = math.exp %d : f32"], t)
            + _generic("%den", [full, row], red, [("%ex", t)], ("%z", r), ["%y = arith.addf %acc, %a0 : f32"], r)
            + _generic("%p", [full, row, full], par, [("%ex", t), ("%den", r)], ("%e", t),
                       ["%y = arith.divf %a0, %a1 : f32"], t)
            + f"  return %p : {t}\n")
    return Probe("layer norm + softmax 256x512", _func([("x", t)], t, body), "arg0.0=x", ((rows, cols),))


def probes(ranks: int) -> list[Probe]:
    """The probe programs for `ranks` ranks (global shapes: the first dim tiled over them; see the module
    docstring); the collective ones only on more than one rank."""
    found = [_matmul("matmul 512^3", 512 * ranks, 512, 512, "arg0.0=x"),
             _matmul("matmul 32x64x64", 32 * ranks, 64, 64, "arg0.0=x"),
             _mlp("MLP 256x128x512, data", 256 * ranks, 128, 512, "arg0.0=x"),
             _mlp("MLP 32x64x256, data", 32 * ranks, 64, 256, "arg0.0=x"),
             _norm_softmax(256 * ranks, 512), _adam("Adam update 128x1024, in cache", 128 * ranks, 1024),
             _adam("Adam update 2048x1024, from memory", 2048 * ranks, 1024),
             _adam("Adam update of 48 parameters of 2x128", 2 * ranks, 128, count=48),
             _linear_backward("linear backward 256x128x512", 256 * ranks, 128, 512, "arg0.0=x;arg1.0=x",
                              ranks > 1)]
    if ranks > 1:
        found += [_mlp("MLP 256x128x512, Megatron", 256, 128, 512 * ranks, "arg1.0=x;arg2.0=x;arg3.1=x", True),
                  _matmul("matmul, weight gathered", 128 * ranks, 128, 128 * ranks, "arg0.0=x;arg1.1=x", True),
                  _gathered_chain("8 matmuls 64x256x256, each weight gathered", 64 * ranks, 256, 8,
                                  ";".join(["arg0.0=x"] + [f"arg{i}.1=x" for i in range(1, 9)]))]
    return found


@dataclass(frozen=True)
class Measured:
    """A probe's compiled program and its median seconds per run."""

    probe: Probe
    graph: KernelGraph
    seconds: float
    rounds: tuple[float, ...]


def default_ranks() -> int:
    """One rank per core of this process (the search prices a device as one rank on one core)."""
    return host_cores()


def measure(ranks: int, repeat: int = 9, rounds: int = 3, mpiexec: str | None = None) -> list[Measured]:
    """Compile every probe for `ranks` ranks and time them (see the module docstring): `rounds` rounds of every
    probe in turn, all on one job (`launch_each`: the ranks start once, not once per probe and round)."""
    mesh = Mesh({"x": ranks})
    rng = np.random.default_rng(0)
    compiled = []
    for probe in probes(ranks):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            program = compile(probe.text, mesh=mesh, tactics=parse_tactics(probe.tactics))
        inputs = [rng.standard_normal(shape, dtype=np.float32) for shape in probe.shapes]
        if mpiexec is None:  # this host's ranks: refused before starting them, as Program.run refuses
            check_ranks(ranks)
            check_memory(program.graph, ranks)
        compiled.append((probe, program, inputs))
    runs = launch_each([(program.graph, inputs, None) for _, program, inputs in compiled] * rounds, ranks,
                       repeat=repeat, mpiexec=mpiexec)
    times = [[timings.seconds for _, timings in runs[i::len(compiled)]] for i in range(len(compiled))]
    return [Measured(probe, program.graph, statistics.median(t), tuple(t))
            for (probe, program, _), t in zip(compiled, times)]


def cache_share(ranks: int, cpu: Path = CPU0) -> float | None:
    """One rank's share of this machine's largest data cache, in bytes (`Machine.cache_bytes`): its size over the
    ranks that share it (one per core); None where the system does not say (Linux's sysfs)."""
    largest = None
    for index in sorted(cpu.glob("cache/index*")):
        try:
            level = int((index / "level").read_text())
            kind = (index / "type").read_text().strip()
            size = _bytes((index / "size").read_text().strip())
            sharing = _count_cpus((index / "shared_cpu_list").read_text().strip())
        except (OSError, ValueError):
            continue
        if kind != "Instruction" and (largest is None or level > largest[0]):
            largest = (level, size, sharing)
    if largest is None:
        return None
    return largest[1] / max(1, min(largest[2], ranks))


def _bytes(text: str) -> int:
    """A sysfs cache size ("32768K", "1M") in bytes."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text[-1:] in units else int(text)


def _count_cpus(text: str) -> int:
    """How many CPUs a sysfs list ("0-3,8-11") names."""
    count = 0
    for part in text.split(","):
        low, _, high = part.partition("-")
        count += int(high or low) - int(low) + 1
    return count


def calibrate_machine(ranks: int | None = None, repeat: int = 9, rounds: int = 3, mpiexec: str | None = None,
                      comm: CostModel | None = None, source: str = "") -> tuple[Machine, list[Measured], list[float]]:
    """This machine's figures fitted to the probes measured on `ranks` ranks (default: one per core), priced with
    the links' figures `comm` (default: calibrated or built-in); (figures, measurements, each probe's
    predicted/measured - 1 under them)."""
    ranks = ranks or default_ranks()
    comm = comm or CostModel.default()
    measured = measure(ranks, repeat, rounds, mpiexec)
    samples = [(m.graph, m.seconds) for m in measured]
    share = cache_share(ranks)
    start = Machine() if share is None else replace(Machine(), cache_bytes=share)
    machine = fit_machine(samples, comm, start, source or f"calibrated on {ranks} rank(s)")
    return machine, measured, relative_errors(samples, machine, comm)
