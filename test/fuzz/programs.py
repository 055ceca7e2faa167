"""Random well-typed global programs: a small IR that prints itself as MLIR and evaluates itself with numpy.

A `Program` is one function over tensors of a single element type (f32, f64,
i32 or bf16) with static shapes: arguments, a list of `Op`s (each defines one value
from earlier values) and the returned values. `to_mlir()` prints a single
`func.func` using linalg named ops, `linalg.generic`, `linalg.reduce`,
`linalg.broadcast`, `linalg.transpose`, `linalg.fill`, `tensor.expand_shape`,
`tensor.collapse_shape`, `arith`/`math` on tensors and splat `arith.constant`
tensors. `evaluate(inputs)` computes the results with numpy alone (never slicer
code): floats in float64 (the reference is then far more precise than the
program under test), i32 with wrap-around, plus for each float result an
absolute error bound of an f32/f64 evaluation (`Reference.error`), used by
`compare`.

`generate(source)` builds a program from a `Source` of choices (see
`source.py`); values stay bounded (inputs in [-1, 1], `exp` only of small
values, products capped) so float comparisons mean something.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import ml_dtypes
import numpy as np

from .source import Source

DTYPES = ("f32", "f64", "i32", "bf16")
NUMPY = {"f32": np.float32, "f64": np.float64, "i32": np.int32, "bf16": np.dtype(ml_dtypes.bfloat16)}
#: bf16: 8 significant bits; Slicer rounds each op's result once (its arithmetic is f32), which the bounds of a
#: rounding per op cover.
UNIT_ROUNDOFF = {"f32": 2.0 ** -24, "f64": 2.0 ** -53, "bf16": 2.0 ** -8}
SIZES = (2, 4, 3, 1, 6, 8, 12)  # simplest first (shrinking goes to the front)
FLOAT_CONSTANTS = (0.5, -1.0, 2.0, 0.25, -0.5, 1.5)
INT_CONSTANTS = (2, -1, 3, 0, 7)
MAG_CAP = 1.0e4  # keep every float value below this (estimated), so rtol comparisons are meaningful
MAX_ARGS = 5
MAX_RANK = 4

UNARY_FLOAT = ("neg", "tanh", "abs", "exp", "square")
UNARY_INT = ("neg", "abs", "square")
BINARY = ("add", "sub", "mul", "max", "min")
NAMED_UNARY = {"neg": "linalg.negf", "tanh": "linalg.tanh", "abs": "linalg.abs", "exp": "linalg.exp",
               "square": "linalg.square"}
NAMED_BINARY = {"add": "linalg.add", "sub": "linalg.sub", "mul": "linalg.mul", "max": "linalg.max", "min": "linalg.min"}


def is_float(dtype: str) -> bool:
    return dtype != "i32"


def tensor_type(shape: Sequence[int], dtype: str) -> str:
    return "tensor<" + "".join(f"{d}x" for d in shape) + dtype + ">"


def scalar_literal(value, dtype: str) -> str:
    if not is_float(dtype):
        return str(int(value))
    if value == -math.inf:
        return {"f32": "0xFF800000", "bf16": "0xFF80"}.get(dtype, "0xFFF0000000000000")
    text = repr(float(value))
    return text if ("." in text or "e" in text) else text + ".0"


@dataclass
class Op:
    kind: str
    ins: tuple[str, ...]
    out: str
    shape: tuple[int, ...]
    attrs: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"kind": self.kind, "ins": list(self.ins), "out": self.out, "shape": list(self.shape),
                "attrs": self.attrs}

    @staticmethod
    def from_json(d: dict) -> Op:
        return Op(d["kind"], tuple(d["ins"]), d["out"], tuple(d["shape"]), _untuple(d.get("attrs", {})))


def _untuple(attrs: dict) -> dict:
    return {k: v for k, v in attrs.items()}


@dataclass
class Program:
    dtype: str
    args: list[tuple[str, tuple[int, ...]]]
    ops: list[Op]
    results: list[str]

    # -- shapes ---------------------------------------------------------------------------------------
    def shapes(self) -> dict[str, tuple[int, ...]]:
        shapes = {name: tuple(shape) for name, shape in self.args}
        for op in self.ops:
            shapes[op.out] = tuple(op.shape)
        return shapes

    @property
    def arg_shapes(self) -> list[tuple[int, ...]]:
        return [tuple(s) for _, s in self.args]

    @property
    def result_shapes(self) -> list[tuple[int, ...]]:
        shapes = self.shapes()
        return [shapes[r] for r in self.results]

    # -- (de)serialisation ----------------------------------------------------------------------------
    def to_json(self) -> dict:
        return {"dtype": self.dtype, "args": [[n, list(s)] for n, s in self.args],
                "ops": [op.to_json() for op in self.ops], "results": list(self.results)}

    @staticmethod
    def from_json(d: dict) -> Program:
        return Program(d["dtype"], [(n, tuple(s)) for n, s in d["args"]], [Op.from_json(o) for o in d["ops"]],
                       list(d["results"]))

    # -- MLIR -------------------------------------------------------------------------------------------
    def to_mlir(self, name: str = "f") -> str:
        return _Printer(self).print(name)

    # -- numpy reference --------------------------------------------------------------------------------
    def random_inputs(self, seed: int) -> list[np.ndarray]:
        rng = np.random.default_rng(seed)
        out = []
        for _, shape in self.args:
            if is_float(self.dtype):
                a = rng.uniform(-1.0, 1.0, size=shape).astype(NUMPY[self.dtype])
            else:
                a = rng.integers(-4, 5, size=shape).astype(np.int32)
            out.append(np.asarray(a))
        return out

    def evaluate(self, inputs: Sequence[np.ndarray]) -> Reference:
        return _evaluate(self, inputs)

    def describe(self) -> str:
        kinds = [op.kind + (f"[{op.attrs['form']}]" if "form" in op.attrs else "") for op in self.ops]
        return f"{self.dtype} {len(self.args)} args, ops {kinds}, {len(self.results)} results"


# ============================================================================ printing


def _map(n: int, dims: Sequence[int]) -> str:
    names = ", ".join(f"d{i}" for i in range(n))
    out = ", ".join(f"d{i}" for i in dims)
    return f"affine_map<({names}) -> ({out})>"


class _Printer:
    def __init__(self, program: Program) -> None:
        self.p = program
        self.dt = program.dtype
        self.lines: list[str] = []
        self.count = 0
        self.shapes = program.shapes()

    def tmp(self, base: str = "t") -> str:
        self.count += 1
        return f"%{base}{self.count}"

    def t(self, name_or_shape) -> str:
        shape = self.shapes[name_or_shape] if isinstance(name_or_shape, str) else name_or_shape
        return tensor_type(shape, self.dt)

    def emit(self, line: str) -> None:
        self.lines.append("  " + line)

    def scalar(self, value) -> str:
        name = self.tmp("c")
        self.emit(f"{name} = arith.constant {scalar_literal(value, self.dt)} : {self.dt}")
        return name

    def empty(self, shape) -> str:
        name = self.tmp("e")
        self.emit(f"{name} = tensor.empty() : {self.t(tuple(shape))}")
        return name

    def filled(self, shape, value, out: str | None = None) -> str:
        c = self.scalar(value)
        e = self.empty(shape)
        name = out or self.tmp("f")
        ty = self.t(tuple(shape))
        self.emit(f"{name} = linalg.fill ins({c} : {self.dt}) outs({e} : {ty}) -> {ty}")
        return name

    def print(self, fname: str) -> str:
        p = self.p
        params = ", ".join(f"{n}: {self.t(n)}" for n, _ in p.args)
        rtypes = [self.t(r) for r in p.results]
        rtext = rtypes[0] if len(rtypes) == 1 else "(" + ", ".join(rtypes) + ")"
        for op in p.ops:
            getattr(self, "op_" + op.kind)(op)
        self.emit(f"return {', '.join(p.results)} : {', '.join(rtypes)}")
        return f"func.func @{fname}({params}) -> {rtext} {{\n" + "\n".join(self.lines) + "\n}\n"

    # -- scalar bodies ----------------------------------------------------------------------------------
    def body_fn(self, fn: str, xs: list[str], body: list[str]) -> str:
        """Append the scalar ops computing fn(xs) to `body`; returns the value name."""
        dt, f = self.dt, is_float(self.dt)
        r = self.tmp("b")
        if fn in BINARY:
            op = {"add": "addf", "sub": "subf", "mul": "mulf", "max": "maximumf", "min": "minimumf"}[fn] if f else \
                 {"add": "addi", "sub": "subi", "mul": "muli", "max": "maxsi", "min": "minsi"}[fn]
            body.append(f"{r} = arith.{op} {xs[0]}, {xs[1]} : {dt}")
        elif fn == "neg":
            if f:
                body.append(f"{r} = arith.negf {xs[0]} : {dt}")
            else:
                z = self.tmp("b")
                body.append(f"{z} = arith.constant 0 : {dt}")
                body.append(f"{r} = arith.subi {z}, {xs[0]} : {dt}")
        elif fn == "tanh":
            body.append(f"{r} = math.tanh {xs[0]} : {dt}")
        elif fn == "exp":
            body.append(f"{r} = math.exp {xs[0]} : {dt}")
        elif fn == "abs":
            body.append(f"{r} = math.{'absf' if f else 'absi'} {xs[0]} : {dt}")
        elif fn == "square":
            body.append(f"{r} = arith.{'mulf' if f else 'muli'} {xs[0]}, {xs[0]} : {dt}")
        else:
            raise ValueError(fn)
        return r

    def generic(self, out: str, ins: list[str], in_maps: list[list[int]], out_shape, out_init: str,
                out_dims: list[int], iterators: list[str], body_of) -> None:
        """A linalg.generic; `body_of(inputs, acc, body_lines)` returns the yielded value."""
        n = len(iterators)
        maps = [_map(n, m) for m in in_maps] + [_map(n, out_dims)]
        its = ", ".join(f'"{i}"' for i in iterators)
        ins_text = ""
        if ins:
            ins_text = f"ins({', '.join(ins)} : {', '.join(self.t(x) for x in ins)}) "
        ty = self.t(tuple(out_shape))
        self.emit(f"{out} = linalg.generic {{indexing_maps = [{', '.join(maps)}], iterator_types = [{its}]}} "
                  f"{ins_text}outs({out_init} : {ty}) {{")
        args = [f"%i{k}" for k in range(len(ins))]
        header = ", ".join(f"{a}: {self.dt}" for a in args + ["%o"])
        body: list[str] = []
        y = body_of(args, "%o", body)
        self.lines.append(f"  ^bb0({header}):")
        for line in body:
            self.emit("  " + line)
        self.emit(f"  linalg.yield {y} : {self.dt}")
        self.emit(f"}} -> {ty}")

    # -- ops --------------------------------------------------------------------------------------------
    def op_unary(self, op: Op) -> None:
        (x,), fn, form = op.ins, op.attrs["fn"], op.attrs["form"]
        ty = self.t(op.shape)
        if form == "named":
            e = self.empty(op.shape)
            self.emit(f"{op.out} = {NAMED_UNARY[fn]} ins({x} : {ty}) outs({e} : {ty}) -> {ty}")
        elif form == "tensor":
            f = is_float(self.dt)
            if fn == "neg" and f:
                self.emit(f"{op.out} = arith.negf {x} : {ty}")
            elif fn == "neg":
                z = self.tmp("z")
                self.emit(f"{z} = arith.constant dense<0> : {ty}")
                self.emit(f"{op.out} = arith.subi {z}, {x} : {ty}")
            elif fn in ("tanh", "exp"):
                self.emit(f"{op.out} = math.{fn} {x} : {ty}")
            elif fn == "abs":
                self.emit(f"{op.out} = math.{'absf' if f else 'absi'} {x} : {ty}")
            elif fn == "square":
                self.emit(f"{op.out} = arith.{'mulf' if f else 'muli'} {x}, {x} : {ty}")
        else:
            n = len(op.shape)
            e = self.empty(op.shape)
            self.generic(op.out, [x], [list(range(n))], op.shape, e, list(range(n)), ["parallel"] * n,
                         lambda a, o, b: self.body_fn(fn, [a[0]], b))

    def op_binary(self, op: Op) -> None:
        fn, form = op.attrs["fn"], op.attrs["form"]
        ty = self.t(op.shape)
        if form == "named":
            e = self.empty(op.shape)
            self.emit(f"{op.out} = {NAMED_BINARY[fn]} ins({op.ins[0]}, {op.ins[1]} : {ty}, {ty}) "
                      f"outs({e} : {ty}) -> {ty}")
        elif form == "tensor":
            f = is_float(self.dt)
            name = {"add": "addf", "sub": "subf", "mul": "mulf", "max": "maximumf", "min": "minimumf"}[fn] if f else \
                   {"add": "addi", "sub": "subi", "mul": "muli", "max": "maxsi", "min": "minsi"}[fn]
            self.emit(f"{op.out} = arith.{name} {op.ins[0]}, {op.ins[1]} : {ty}")
        else:
            n = len(op.shape)
            e = self.empty(op.shape)
            self.generic(op.out, list(op.ins), [list(m) for m in op.attrs["maps"]], op.shape, e, list(range(n)),
                         ["parallel"] * n, lambda a, o, b: self.body_fn(fn, a, b))

    def op_reduce(self, op: Op) -> None:
        (x,), at = op.ins, op.attrs
        fn, dims, form, pre, acc_first = (
            at["fn"],
            list(at["dims"]),
            at["form"],
            at.get("pre"),
            at.get("acc_first", False),
        )
        init = at.get("init")
        if init is None:
            init = 0 if fn == "sum" else (-math.inf if is_float(self.dt) else -(2 ** 31))
        f = self.filled(op.shape, init)
        xshape = self.shapes[x]
        comb = "add" if fn == "sum" else "max"

        def body(a, o, b):
            v = a[0]
            if pre:
                v = self.body_fn(pre, [v], b)
            return self.body_fn(comb, [o, v] if acc_first else [v, o], b)

        if form == "reduce":
            ty_in, ty_out = self.t(x), self.t(op.shape)
            self.emit(f"{op.out} = linalg.reduce ins({x} : {ty_in}) outs({f} : {ty_out}) dimensions = {dims}")
            lines: list[str] = []
            y = body(["%i0"], "%o", lines)
            self.emit(f"  (%i0: {self.dt}, %o: {self.dt}) {{")
            for line in lines:
                self.emit("    " + line)
            self.emit(f"    linalg.yield {y} : {self.dt}")
            self.emit("  }")
        else:
            n = len(xshape)
            kept = [d for d in range(n) if d not in dims]
            its = ["reduction" if d in dims else "parallel" for d in range(n)]
            self.generic(op.out, [x], [list(range(n))], op.shape, f, kept, its, body)

    def op_matmul(self, op: Op) -> None:
        self._contraction(op, "linalg.matmul", [[0, 2], [2, 1]], [0, 1], ["parallel", "parallel", "reduction"])

    def op_batch_matmul(self, op: Op) -> None:
        self._contraction(op, "linalg.batch_matmul", [[0, 1, 3], [0, 3, 2]], [0, 1, 2],
                          ["parallel", "parallel", "parallel", "reduction"])

    def _contraction(self, op: Op, named: str, in_maps, out_dims, its) -> None:
        a, b = op.ins
        f = self.filled(op.shape, op.attrs.get("init", 0))
        ty = self.t(op.shape)
        if op.attrs["form"] == "named":
            self.emit(f"{op.out} = {named} ins({a}, {b} : {self.t(a)}, {self.t(b)}) outs({f} : {ty}) -> {ty}")
        else:
            def body(args, o, lines):
                m = self.body_fn("mul", args, lines)
                return self.body_fn("add", [o, m], lines)

            self.generic(op.out, [a, b], in_maps, op.shape, f, out_dims, its, body)

    def op_transpose(self, op: Op) -> None:
        (x,), perm = op.ins, list(op.attrs["perm"])
        e = self.empty(op.shape)
        if op.attrs["form"] == "named":
            self.emit(f"{op.out} = linalg.transpose ins({x} : {self.t(x)}) outs({e} : {self.t(op.shape)}) "
                      f"permutation = {perm}")
        else:
            n = len(perm)
            inv = [perm.index(j) for j in range(n)]  # input dim j is walked by output dim inv[j]
            self.generic(op.out, [x], [inv], op.shape, e, list(range(n)), ["parallel"] * n, lambda a, o, b: a[0])

    def op_broadcast(self, op: Op) -> None:
        (x,), dims = op.ins, list(op.attrs["dims"])
        e = self.empty(op.shape)
        if op.attrs["form"] == "named":
            self.emit(f"{op.out} = linalg.broadcast ins({x} : {self.t(x)}) outs({e} : {self.t(op.shape)}) "
                      f"dimensions = {dims}")
        else:
            n = len(op.shape)
            kept = [d for d in range(n) if d not in dims]
            self.generic(op.out, [x], [kept], op.shape, e, list(range(n)), ["parallel"] * n, lambda a, o, b: a[0])

    def op_expand(self, op: Op) -> None:
        (x,), groups = op.ins, op.attrs["groups"]
        self.emit(f"{op.out} = tensor.expand_shape {x} {groups} output_shape {list(op.shape)} : "
                  f"{self.t(x)} into {self.t(op.shape)}")

    def op_collapse(self, op: Op) -> None:
        (x,), groups = op.ins, op.attrs["groups"]
        self.emit(f"{op.out} = tensor.collapse_shape {x} {groups} : {self.t(x)} into {self.t(op.shape)}")

    def op_fill(self, op: Op) -> None:
        self.filled(op.shape, op.attrs["value"], out=op.out)

    def op_splat(self, op: Op) -> None:
        self.emit(f"{op.out} = arith.constant dense<{scalar_literal(op.attrs['value'], self.dt)}> : "
                  f"{self.t(op.shape)}")


# ============================================================================ numpy reference


@dataclass
class Reference:
    """The exact-ish results (float64 for float programs, int32 for i32) and, per result, an absolute error
    bound for an evaluation in the program's own precision."""

    results: list[np.ndarray]
    error: list[float]


def _wrap(a) -> np.ndarray:
    return np.asarray(np.asarray(a, dtype=np.int64).astype(np.int32))


def _scalar_fn(fn: str, xs: list[np.ndarray], dtype: str) -> np.ndarray:
    if is_float(dtype):
        x = xs[0]
        if fn == "add":
            return x + xs[1]
        if fn == "sub":
            return x - xs[1]
        if fn == "mul":
            return x * xs[1]
        if fn == "max":
            return np.maximum(x, xs[1])
        if fn == "min":
            return np.minimum(x, xs[1])
        if fn == "neg":
            return -x
        if fn == "tanh":
            return np.tanh(x)
        if fn == "exp":
            return np.exp(x)
        if fn == "abs":
            return np.abs(x)
        if fn == "square":
            return x * x
    else:
        x = [np.asarray(v, dtype=np.int64) for v in xs]
        if fn == "add":
            return _wrap(x[0] + x[1])
        if fn == "sub":
            return _wrap(x[0] - x[1])
        if fn == "mul":
            return _wrap(x[0] * x[1])
        if fn == "max":
            return _wrap(np.maximum(x[0], x[1]))
        if fn == "min":
            return _wrap(np.minimum(x[0], x[1]))
        if fn == "neg":
            return _wrap(-x[0])
        if fn == "abs":
            return _wrap(np.abs(x[0]))
        if fn == "square":
            return _wrap(x[0] * x[0])
    raise ValueError(f"{fn} on {dtype}")


def _amax(a) -> float:
    a = np.asarray(a)
    return float(np.max(np.abs(a))) if a.size else 0.0


def _fn_error(fn: str, xs, errs, out, u: float) -> float:
    """Error bound of fn(xs) given the inputs' bounds `errs` (all scalars: max over elements)."""
    mo = _amax(out)
    if fn in ("add", "sub"):
        return errs[0] + errs[1] + u * mo
    if fn == "mul":
        return errs[0] * _amax(xs[1]) + errs[1] * _amax(xs[0]) + errs[0] * errs[1] + u * mo
    if fn in ("max", "min"):
        return max(errs)
    if fn in ("neg", "abs"):
        return errs[0]
    if fn == "tanh":
        return errs[0] + 8 * u
    if fn == "exp":
        e = errs[0]
        return (math.expm1(e) if e < 1 else math.inf) * mo + 8 * u * mo
    if fn == "square":
        return 2 * errs[0] * _amax(xs[0]) + errs[0] * errs[0] + u * mo
    raise ValueError(fn)


def _project(x: np.ndarray, dims: Sequence[int], rank: int) -> np.ndarray:
    """An operand whose axis i walks output dim dims[i], as an array broadcastable to the output."""
    dims = list(dims)
    order = sorted(range(len(dims)), key=lambda i: dims[i])
    y = np.transpose(x, order) if len(dims) > 1 else x
    shape = [1] * rank
    for i in order:
        shape[dims[i]] = x.shape[i]
    return y.reshape(shape)


def _evaluate(program: Program, inputs: Sequence[np.ndarray]) -> Reference:
    dt = program.dtype
    fl = is_float(dt)
    u = UNIT_ROUNDOFF.get(dt, 0.0)
    env: dict[str, tuple[np.ndarray, float]] = {}
    for (name, shape), a in zip(program.args, inputs):
        a = np.asarray(a)
        if tuple(a.shape) != tuple(shape):
            raise ValueError(f"input {name} has shape {a.shape}, want {shape}")
        env[name] = (a.astype(np.float64) if fl else a.astype(np.int32), 0.0)

    for op in program.ops:
        xs = [env[i][0] for i in op.ins]
        es = [env[i][1] for i in op.ins]
        at = op.attrs
        k = op.kind
        if k == "unary":
            out = _scalar_fn(at["fn"], xs, dt)
            err = _fn_error(at["fn"], xs, es, out, u) if fl else 0.0
        elif k == "binary":
            n = len(op.shape)
            maps = at.get("maps") or [list(range(n)), list(range(n))]
            ys = [np.broadcast_to(_project(x, m, n), op.shape) for x, m in zip(xs, maps)]
            out = _scalar_fn(at["fn"], ys, dt)
            err = _fn_error(at["fn"], ys, es, out, u) if fl else 0.0
        elif k == "reduce":
            x, e = xs[0], es[0]
            if at.get("pre"):
                px = _scalar_fn(at["pre"], [x], dt)
                e = _fn_error(at["pre"], [x], [e], px, u) if fl else 0.0
                x = px
            dims = tuple(at["dims"])
            n_red = int(np.prod([x.shape[d] for d in dims])) if dims else 1
            init = at.get("init")
            if at["fn"] == "sum":
                init = 0 if init is None else init
                if fl:
                    out = np.sum(x, axis=dims) + init
                    err = n_red * e + (n_red + 1) * u * (n_red * _amax(x) + abs(init))
                else:
                    out = _wrap(np.sum(x.astype(np.int64), axis=dims) + init)
                    err = 0.0
            else:
                if init is None:
                    init = -math.inf if fl else -(2 ** 31)
                out = np.maximum(np.max(x, axis=dims), init)
                out = out if fl else _wrap(out)
                err = e
        elif k in ("matmul", "batch_matmul"):
            a, b = xs
            init = at.get("init", 0)
            K = a.shape[-1]
            if fl:
                out = np.matmul(a, b) + init
                err = K * (es[0] * _amax(b) + es[1] * _amax(a) + es[0] * es[1]) + \
                    (K + 1) * u * (K * _amax(a) * _amax(b) + abs(init))
            else:
                out = _wrap(np.matmul(a.astype(np.int64), b.astype(np.int64)) + init)
                err = 0.0
        elif k == "transpose":
            out, err = np.transpose(xs[0], at["perm"]), es[0]
        elif k == "broadcast":
            n = len(op.shape)
            kept = [d for d in range(n) if d not in at["dims"]]
            out, err = np.broadcast_to(_project(xs[0], kept, n), op.shape), es[0]
        elif k in ("expand", "collapse"):
            out, err = np.reshape(xs[0], op.shape), es[0]
        elif k in ("fill", "splat"):
            out = np.full(op.shape, at["value"], dtype=np.float64 if fl else np.int32)
            err = 0.0
        else:
            raise ValueError(f"unknown op kind {k}")
        out = np.array(out, dtype=np.float64 if fl else np.int32)
        if tuple(out.shape) != tuple(op.shape):
            raise AssertionError(f"reference of {op.out} ({k}) has shape {out.shape}, expected {op.shape}")
        env[op.out] = (out, float(err))
    return Reference([env[r][0].copy() for r in program.results], [env[r][1] for r in program.results])


# ============================================================================ comparison


RTOL = {"f32": 1e-4, "f64": 1e-9, "bf16": 2.0 ** -6}


@dataclass
class Mismatch:
    result: int
    reason: str
    max_diff: float | None = None

    def __str__(self) -> str:
        return f"result #{self.result}: {self.reason}"


def compare(program: Program, reference: Reference, got) -> Mismatch | None:
    """None if `got` (the results of the program under test) matches the reference, else the first mismatch.

    i32: exact. Floats: |got - ref| <= rtol*|ref| + rtol*max(1, max|ref|) + 4*error bound, NaN equal to NaN.
    """
    dt = program.dtype
    if not isinstance(got, (tuple, list)):
        got = (got,)
    if len(got) != len(reference.results):
        return Mismatch(-1, f"{len(got)} results, expected {len(reference.results)}")
    for i, (g, want, err) in enumerate(zip(got, reference.results, reference.error)):
        g = np.asarray(g)
        if tuple(g.shape) != tuple(want.shape):
            return Mismatch(i, f"shape {g.shape}, expected {want.shape}")
        if g.dtype != NUMPY[dt]:
            return Mismatch(i, f"dtype {g.dtype}, expected {np.dtype(NUMPY[dt])}")
        if not is_float(dt):
            bad = g != want
            if np.any(bad):
                diff = np.abs(g.astype(np.int64) - want.astype(np.int64))
                return Mismatch(i, f"{int(bad.sum())} of {g.size} elements differ (max |diff| {int(diff.max())})",
                                float(diff.max()))
            continue
        g64 = g.astype(np.float64)
        both_nan = np.isnan(g64) & np.isnan(want)
        rtol = RTOL[dt]
        tol = rtol * np.abs(want) + rtol * max(1.0, _amax(np.nan_to_num(want))) + 4 * err
        with np.errstate(invalid="ignore"):
            diff = np.abs(g64 - want)
            bad = ~both_nan & ~(diff <= tol)
        if np.any(bad):
            d = float(np.nanmax(np.where(bad, diff, 0))) if np.any(~np.isnan(diff[bad])) else math.nan
            return Mismatch(i, f"{int(bad.sum())} of {g.size} elements differ (max |diff| {d:.3g}, "
                               f"max |ref| {_amax(np.nan_to_num(want)):.3g}, error bound {err:.3g})", d)
    return None


# ============================================================================ generation


@dataclass
class _Val:
    name: str
    shape: tuple[int, ...]
    mag: float  # an estimate of max |value| (floats); 0 for ints


@dataclass(frozen=True)
class Features:
    """Switches to steer generation away from a known bug (to find the ones behind it)."""

    zero_d: bool = True  # 0-d arguments, full reductions, broadcasts of 0-d operands
    multi_result: bool = True  # several results
    return_args: bool = True  # an argument returned as is
    deep: bool = True  # deep chains of residual blocks (`_Gen.deep_chain`)

    def to_json(self) -> dict:
        return dict(self.__dict__)


class _Gen:
    def __init__(self, src: Source, dtype: str, features: Features = Features()) -> None:
        self.features = features
        self.src = src
        self.dt = dtype
        self.fl = is_float(dtype)
        self.args: list[_Val] = []
        self.ops: list[Op] = []
        self.pool: list[_Val] = []
        self.count = 0

    # -- values ---------------------------------------------------------------------------------------
    def shape(self, rank: int | None = None) -> tuple[int, ...]:
        if rank is None:
            rank = self.src.weighted([(4, 2), (2, 1), (2, 3), (1 if self.features.zero_d else 0, 0)])
        return tuple(self.src.choice(SIZES) for _ in range(rank))

    def new_arg(self, shape) -> _Val:
        v = _Val(f"%a{len(self.args)}", tuple(shape), 1.0 if self.fl else 0.0)
        self.args.append(v)
        self.pool.append(v)
        return v

    def define(self, kind, ins: Sequence[_Val], shape, mag, **attrs) -> _Val:
        v = _Val(f"%v{self.count}", tuple(shape), mag if self.fl else 0.0)
        self.count += 1
        self.ops.append(Op(kind, tuple(x.name for x in ins), v.name, tuple(shape), attrs))
        self.pool.append(v)
        return v

    def pick(self, pred=lambda v: True) -> _Val | None:
        cands = [v for v in reversed(self.pool) if pred(v)]
        if not cands:
            return None
        return cands[self.src.integer(0, len(cands) - 1)]

    def pick_or_arg(self, pred, make_shape) -> _Val:
        v = self.pick(pred)
        if v is None:
            v = self.new_arg(make_shape())
        return v

    def constant(self) -> float:
        return self.src.choice(FLOAT_CONSTANTS if self.fl else INT_CONSTANTS)

    def operand(self, shape) -> _Val:
        """A value of exactly `shape`: an existing one, a new argument, a splat constant or a fill."""
        shape = tuple(shape)
        existing = [v for v in reversed(self.pool) if v.shape == shape]
        options = []
        if existing:
            options.append((5, "existing"))
        options.append((4 if len(self.args) < MAX_ARGS else 0, "arg"))
        options += [(1, "splat"), (1, "fill")]
        how = self.src.weighted(options)
        if how == "existing":
            return existing[self.src.integer(0, len(existing) - 1)]
        if how == "arg":
            return self.new_arg(shape)
        value = self.constant()
        return self.define(how, [], shape, abs(value), value=value)

    # -- ops ------------------------------------------------------------------------------------------
    def op(self) -> None:
        kind = self.src.weighted([(3, "unary"), (4, "binary"), (3, "reduce"), (3, "matmul"), (2, "transpose"),
                                  (2, "broadcast"), (2, "expand"), (2, "collapse"), (1, "batch_matmul")])
        getattr(self, "gen_" + kind)()

    def form(self, named_ok: bool = True) -> str:
        return self.src.weighted([(3, "generic"), (1 if named_ok else 0, "named"), (1, "tensor")])

    def gen_unary(self, x: _Val | None = None, fn: str | None = None) -> _Val:
        x = x or self.pick()
        if fn is None:
            fns = [f for f in (UNARY_FLOAT if self.fl else UNARY_INT)
                   if not (f == "exp" and x.mag > 3) and not (f == "square" and x.mag * x.mag > MAG_CAP)]
            fn = self.src.choice(fns)
        form = self.form(named_ok=self.fl)
        if fn == "tanh":
            mag = 1.0
        elif fn == "exp":
            mag = math.exp(min(x.mag, 700.0))
        elif fn == "square":
            mag = x.mag * x.mag
        else:
            mag = x.mag
        return self.define("unary", [x], x.shape, mag, fn=fn, form=form)

    def gen_binary(self) -> _Val:
        x = self.pick()
        n = len(x.shape)
        form = self.form()
        maps = [list(range(n)), list(range(n))]
        if form == "generic" and n > 0 and self.src.boolean(0.4):
            dims = self.src.subset(list(range(n)), min_size=0 if self.features.zero_d else 1)
            maps[1] = self.src.permutation(dims)
        y = self.operand(tuple(x.shape[d] for d in maps[1]))
        ins = [x, y]
        if self.src.boolean(0.3):
            ins, maps = ins[::-1], maps[::-1]
        fns = [f for f in BINARY if not (f == "mul" and x.mag * y.mag > MAG_CAP)]
        fn = self.src.choice(fns)
        mag = {"add": x.mag + y.mag, "sub": x.mag + y.mag, "mul": x.mag * y.mag}.get(fn, max(x.mag, y.mag))
        attrs = dict(fn=fn, form=form)
        if form == "generic":
            attrs["maps"] = maps
        return self.define("binary", ins, x.shape, mag, **attrs)

    def gen_reduce(self) -> _Val:
        low = 1 if self.features.zero_d else 2
        x = self.pick_or_arg(lambda v: len(v.shape) >= low, lambda: self.shape(self.src.integer(low, 3)))
        n = len(x.shape)
        dims = list(range(n)) if self.src.boolean(0.25) else self.src.subset(list(range(n)), min_size=1)
        if not self.features.zero_d and len(dims) == n:
            dims = dims[:-1]
        fn = self.src.choice(("sum", "max"))
        form = self.src.choice(("generic", "reduce"))
        pres = [None, "square", "abs"] + (["tanh"] if self.fl else [])
        pre = self.src.choice(pres) if self.src.boolean(0.3) else None
        if pre == "square" and x.mag * x.mag > MAG_CAP:
            pre = "abs"
        init = self.constant() if self.src.boolean(0.2) else None
        acc_first = self.src.boolean(0.5)
        shape = tuple(s for d, s in enumerate(x.shape) if d not in dims)
        count = int(np.prod([x.shape[d] for d in dims]))
        pm = {"square": x.mag * x.mag, "tanh": 1.0}.get(pre, x.mag)
        mag = (count * pm if fn == "sum" else pm) + abs(init or 0)
        if fn == "sum" and mag > MAG_CAP:
            pre = "tanh" if self.fl else pre
            mag = count + abs(init or 0)
        return self.define("reduce", [x], shape, mag, fn=fn, dims=dims, form=form, pre=pre, init=init,
                           acc_first=acc_first)

    def _capped(self, x: _Val, mag: float) -> bool:
        return self.fl and mag > MAG_CAP

    def gen_matmul(self) -> _Val:
        x = self.pick_or_arg(lambda v: len(v.shape) == 2, lambda: self.shape(2))
        form = self.src.choice(("named", "generic"))
        if self.src.boolean(0.5):  # x on the left: [M, K] @ [K, N]
            y = self.operand((x.shape[1], self.src.choice(SIZES)))
            a, b = x, y
        else:
            y = self.operand((self.src.choice(SIZES), x.shape[0]))
            a, b = y, x
        K = a.shape[1]
        init = self.constant() if self.src.boolean(0.15) else 0
        mag = K * a.mag * b.mag + abs(init)
        if self._capped(x, mag):
            return self.gen_unary(x, "tanh")
        return self.define("matmul", [a, b], (a.shape[0], b.shape[1]), mag, form=form, init=init)

    def gen_batch_matmul(self) -> _Val:
        x = self.pick_or_arg(lambda v: len(v.shape) == 3, lambda: self.shape(3))
        form = self.src.choice(("named", "generic"))
        B = x.shape[0]
        if self.src.boolean(0.5):
            y = self.operand((B, x.shape[2], self.src.choice(SIZES)))
            a, b = x, y
        else:
            y = self.operand((B, self.src.choice(SIZES), x.shape[1]))
            a, b = y, x
        init = self.constant() if self.src.boolean(0.15) else 0
        mag = a.shape[2] * a.mag * b.mag + abs(init)
        if self._capped(x, mag):
            return self.gen_unary(x, "tanh")
        return self.define("batch_matmul", [a, b], (B, a.shape[1], b.shape[2]), mag, form=form, init=init)

    def gen_transpose(self) -> _Val:
        x = self.pick_or_arg(lambda v: len(v.shape) >= 2, lambda: self.shape(self.src.integer(2, 3)))
        perm = self.src.permutation(list(range(len(x.shape))))
        form = self.src.choice(("named", "generic"))
        return self.define("transpose", [x], tuple(x.shape[p] for p in perm), x.mag, perm=perm, form=form)

    def gen_broadcast(self) -> _Val:
        x = self.pick_or_arg(lambda v: len(v.shape) <= 3, lambda: self.shape(1))
        n = len(x.shape)
        k = self.src.integer(1, min(2, MAX_RANK - n))
        out_rank = n + k
        dims = sorted(self.src.permutation(list(range(out_rank)))[:k])
        shape, it = [], iter(x.shape)
        for d in range(out_rank):
            shape.append(self.src.choice(SIZES) if d in dims else next(it))
        form = self.src.choice(("named", "generic"))
        return self.define("broadcast", [x], tuple(shape), x.mag, dims=dims, form=form)

    def gen_expand(self) -> _Val:
        x = self.pick_or_arg(lambda v: 1 <= len(v.shape) <= MAX_RANK - 1, lambda: self.shape(self.src.integer(1, 2)))
        n = len(x.shape)
        d = self.src.integer(0, n - 1)
        size = x.shape[d]
        divisors = [p for p in range(1, size + 1) if size % p == 0]
        p = self.src.choice(divisors[1:] + divisors[:1])  # a trivial split (1 x size) last
        groups, shape, j = [], [], 0
        for i, s in enumerate(x.shape):
            if i == d:
                groups.append([j, j + 1])
                shape += [p, s // p]
                j += 2
            else:
                groups.append([j])
                shape.append(s)
                j += 1
        return self.define("expand", [x], tuple(shape), x.mag, groups=groups)

    def gen_collapse(self) -> _Val:
        x = self.pick_or_arg(lambda v: len(v.shape) >= 2, lambda: self.shape(self.src.integer(2, 3)))
        n = len(x.shape)
        start = self.src.integer(0, n - 2)
        length = self.src.integer(2, n - start)
        groups, shape, i = [], [], 0
        while i < n:
            if i == start:
                groups.append(list(range(i, i + length)))
                shape.append(int(np.prod(x.shape[i:i + length])))
                i += length
            else:
                groups.append([i])
                shape.append(x.shape[i])
                i += 1
        return self.define("collapse", [x], tuple(shape), x.mag, groups=groups)

    # -- deep programs --------------------------------------------------------------------------------
    def deep_chain(self) -> Program:
        """1 to 8 identical residual blocks, x = x + f(x @ w) (f = tanh for floats, neg for ints), sharing
        the weight w; each block's input feeds its matmul, the residual add, and in some programs a third
        consumer (a max with the block's output, kept as an extra result). The class of program where
        propagation once copied every producer into each consumer, exponentially in depth."""
        rows, width = self.src.choice(SIZES[:4] + (8,)), self.src.choice((2, 4, 3, 6, 8))
        depth = self.src.integer(1, 8)  # (1 and 2 too: shrinking a failure reaches them)
        x = self.new_arg((rows, width))
        w = self.new_arg((width, width))
        side_every = self.src.choice((0, 2, 3))  # a third consumer every k-th block (0: never)
        form = self.form()
        extra: list[_Val] = []
        for i in range(depth):
            h = self.define("matmul", [x, w], (rows, width), 1.0, form=self.src.choice(("named", "generic")), init=0)
            h = self.gen_unary(h, "tanh" if self.fl else "neg")
            attrs = dict(fn="add", form=form)
            if form == "generic":
                attrs["maps"] = [[0, 1], [0, 1]]
            out = self.define("binary", [x, h], (rows, width), x.mag + 1.0, **attrs)
            if side_every and i % side_every == side_every - 1:
                side = dict(fn="max", form=form)
                if form == "generic":
                    side["maps"] = [[0, 1], [0, 1]]
                extra.append(self.define("binary", [x, out], (rows, width), out.mag, **side))
            x = out
        results = [x.name] + [v.name for v in extra[:2]] if self.features.multi_result else [x.name]
        return Program(self.dt, [(a.name, a.shape) for a in self.args], self.ops, results)


DEEP_SHARE = 0.15  # of the programs drawn: deep chains of residual blocks (`_Gen.deep_chain`)


def generate(src: Source, max_ops: int = 8, features: Features = Features()) -> Program:
    """A random well-typed program (1 to `max_ops` ops besides fills/constants), or with probability
    `DEEP_SHARE` a deep chain of residual blocks (`max_ops` does not bound those)."""
    dtype = src.weighted([(5, "f32"), (2, "f64"), (3, "i32"), (2, "bf16")])
    g = _Gen(src, dtype, features)
    if features.deep and src.boolean(DEEP_SHARE):
        return g.deep_chain()
    for _ in range(src.integer(1, 2)):
        g.new_arg(g.shape())
    for _ in range(src.integer(1, max_ops)):
        g.op()
    last = g.pool[-1]
    used = {i for op in g.ops for i in op.ins}
    results = [last.name]
    for op in g.ops:
        if (features.multi_result and op.out != last.name and op.out not in used
                and op.kind not in ("fill", "splat") and src.boolean(0.4)):
            results.append(op.out)
    if features.return_args and src.boolean(0.04):
        results.append(g.args[src.integer(0, len(g.args) - 1)].name)
    return Program(dtype, [(a.name, a.shape) for a in g.args], g.ops, results)
