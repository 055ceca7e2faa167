"""Vectorizable expansions of math functions (exp, tanh, erf, log) into arith ops.

LLVM has no vector instruction for these: `llvm.exp` on `vector<16xf32>` becomes 16 calls to
`expf`, which made softmax far slower than a memory copy. The generated kernels (`rows.py`,
`contract.py`) emit these expansions instead; they work for scalars and vectors of f32/f64 alike.

Details: docs/module-notes.md, `lowering/vector_math.py`.
"""

from __future__ import annotations

import math

from mlir.dialects import math as math_d

from .emitter import Emitter

EXPANDED = (math_d.ExpOp.OPERATION_NAME, math_d.TanhOp.OPERATION_NAME, math_d.ErfOp.OPERATION_NAME,
            math_d.LogOp.OPERATION_NAME)  # the functions `expand` may take


class _Ops:
    """Typed arith helpers on one (scalar or vector) float type."""

    def __init__(self, e: Emitter, type_: str, avx512: bool = False):
        self.e = e
        self.t = type_
        self.elem = type_.split("x")[-1].rstrip(">") if type_.startswith("vector<") else type_
        self.lanes = int(type_[len("vector<"):].split("x")[0]) if type_.startswith("vector<") else None
        self.bits = {"f32": 32, "f64": 64}[self.elem]
        self.it = f"i{self.bits}" if self.lanes is None else f"vector<{self.lanes}xi{self.bits}>"
        self.bt = "i1" if self.lanes is None else f"vector<{self.lanes}xi1>"
        self._consts: dict[str, str] = {}
        # vscalefps/pd: p * 2^n with overflow to inf and underflow to 0 done by the instruction.
        self.scalef = avx512 and self.lanes is not None and self.lanes * self.bits == 512

    def c(self, value: float) -> str:
        text = (
            repr(float(value)) if math.isfinite(value) else ("0x7F800000" if self.bits == 32 else "0x7FF0000000000000")
        )
        if not math.isfinite(value):
            if value < 0:
                text = "0xFF800000" if self.bits == 32 else "0xFFF0000000000000"
        key = f"f{text}"
        if key not in self._consts:
            if self.lanes is None:
                self._consts[key] = self.e.value(f"arith.constant {text} : {self.t}", "m")
            else:
                self._consts[key] = self.e.value(f"arith.constant dense<{text}> : {self.t}", "m")
        return self._consts[key]

    def ci(self, value: int) -> str:
        key = f"i{value}"
        if key not in self._consts:
            if self.lanes is None:
                self._consts[key] = self.e.value(f"arith.constant {value} : {self.it}", "m")
            else:
                self._consts[key] = self.e.value(f"arith.constant dense<{value}> : {self.it}", "m")
        return self._consts[key]

    def op(self, name: str, *args: str) -> str:
        return self.e.value(f"arith.{name} {', '.join(args)} : {self.t}", "m")

    def add(self, a, b): return self.op("addf", a, b)  # noqa: E704
    def sub(self, a, b): return self.op("subf", a, b)  # noqa: E704
    def mul(self, a, b): return self.op("mulf", a, b)  # noqa: E704
    def div(self, a, b): return self.op("divf", a, b)  # noqa: E704
    def max(self, a, b): return self.op("maximumf", a, b)  # noqa: E704
    def min(self, a, b): return self.op("minimumf", a, b)  # noqa: E704

    def fma(self, a, b, c) -> str:
        return self.e.value(f"math.fma {a}, {b}, {c} : {self.t}", "m")

    def neg(self, a) -> str:
        return self.e.value(f"arith.negf {a} : {self.t}", "m")

    def abs(self, a) -> str:
        return self.e.value(f"math.absf {a} : {self.t}", "m")

    def cmp(self, predicate: str, a: str, b: str) -> str:
        return self.e.value(f"arith.cmpf {predicate}, {a}, {b} : {self.t}", "m")

    def select(self, cond: str, a: str, b: str) -> str:
        return self.e.value(f"arith.select {cond}, {a}, {b} : {self.bt}, {self.t}", "m")

    def round(self, a) -> str:
        return self.e.value(f"math.roundeven {a} : {self.t}", "m")

    def copysign(self, a, b) -> str:
        return self.e.value(f"math.copysign {a}, {b} : {self.t}", "m")

    def horner(self, x: str, coefficients: list[float]) -> str:
        """c0 + x (c1 + x (c2 + ...)), coefficients from c0."""
        result = self.c(coefficients[-1])
        for coefficient in reversed(coefficients[:-1]):
            result = self.fma(result, x, self.c(coefficient))
        return result


def _exp(o: _Ops, x: str) -> str:
    f32 = o.bits == 32
    ln2_hi, ln2_lo = (0.693145751953125, 1.428606765330187e-06) if f32 else (0.6931471803691238, 1.9082149292705877e-10)
    terms = 7 if f32 else 14
    e = o.e
    if o.scalef:
        # AVX-512: x clamped to +-(a bit past the overflow bound) keeps r small; vscalef then gives
        # inf / 0 / subnormals / NaN exactly. 13 vector ops.
        bound = 200.0 if f32 else 1500.0
        clamped = o.max(o.min(x, o.c(bound)), o.c(-bound))
        n = o.round(o.mul(clamped, o.c(1.4426950408889634)))
        r = o.fma(n, o.c(-ln2_hi), clamped)
        r = o.fma(n, o.c(-ln2_lo), r)
        p = o.horner(r, [1.0 / math.factorial(i) for i in range(terms)])
        mask = e.value(f"arith.constant -1 : i{o.lanes}", "m")
        rounding = e.value("arith.constant 4 : i32", "m")  # _MM_FROUND_CUR_DIRECTION
        # Operands in the LLVM intrinsic's order (a, b, passthrough, mask, rounding): p * 2^floor(n)
        # (checked numerically in test_rows.py::test_math_functions_are_accurate).
        return e.value(f"x86vector.avx512.mask.scalef {p}, {n}, {p}, {mask}, {rounding} : {o.t}", "m")
    # Clamped so that 2^n stays a normal number: n = round(x / ln 2) in [-126, 128] (f32); n = 128
    # only with r < 0, where p < 1 keeps the biased exponent at 254.
    hi_limit = 88.72283905206835 if f32 else 709.782712893384
    lo_limit = -87.3 if f32 else -708.3
    clamped = o.max(o.min(x, o.c(hi_limit)), o.c(lo_limit))  # NaN goes through (and stays NaN below)
    n = o.round(o.mul(clamped, o.c(1.4426950408889634)))
    # Cody-Waite: ln 2 split so that n * ln2_hi is exact.
    r = o.fma(n, o.c(-ln2_hi), clamped)
    r = o.fma(n, o.c(-ln2_lo), r)
    p = o.horner(r, [1.0 / math.factorial(i) for i in range(terms)])
    # p * 2^n: add n to p's exponent field.
    shift = 23 if f32 else 52
    ni = e.value(f"arith.fptosi {n} : {o.t} to {o.it}", "m")
    shifted = e.value(f"arith.shli {ni}, {o.ci(shift)} : {o.it}", "m")
    pbits = e.value(f"arith.bitcast {p} : {o.t} to {o.it}", "m")
    ybits = e.value(f"arith.addi {pbits}, {shifted} : {o.it}", "m")
    y = e.value(f"arith.bitcast {ybits} : {o.it} to {o.t}", "m")
    y = o.select(o.cmp("ogt", x, o.c(hi_limit)), o.c(math.inf), y)
    return o.select(o.cmp("olt", x, o.c(lo_limit)), o.c(0.0), y)  # results below the smallest normal flush to 0


def _tanh(o: _Ops, x: str) -> str:
    if o.bits == 32:
        # A rational minimax form (the one Eigen uses for float): x p(x^2) / q(x^2) on x clamped to
        # +-7.9 (tanh is 1 in float beyond); 13 vector ops with one division instead of an exp.
        clamped = o.max(o.min(x, o.c(7.90531110763549805)), o.c(-7.90531110763549805))
        x2 = o.mul(clamped, clamped)
        p = o.horner(x2, [4.89352455891786e-03, 6.37261928875436e-04, 1.48572235717979e-05, 5.12229709037114e-08,
                          -8.60467152213735e-11, 2.00018790482477e-13, -2.76076847742355e-16])
        q = o.horner(x2, [4.89352518554385e-03, 2.26843463243900e-03, 1.18534705686654e-04, 1.19825839466702e-06])
        return o.div(o.mul(clamped, p), q)
    ax = o.abs(x)
    # |x| >= 0.55: 1 - 2 / (exp(2|x|) + 1), no cancellation there.
    ex = _exp(o, o.mul(ax, o.c(2.0)))
    big = o.sub(o.c(1.0), o.div(o.c(2.0), o.add(ex, o.c(1.0))))
    # |x| < 0.55: tanh(x) = x + x^3 * q(x^2), odd Taylor series (alternating, terms to x^17).
    coefficients = [1.0, -1 / 3, 2 / 15, -17 / 315, 62 / 2835, -1382 / 155925, 21844 / 6081075, -929569 / 638512875,
                    6404582 / 10854718875]
    if o.bits == 64:
        coefficients += [-443861162 / 1856156927625, 18888466084 / 194896477400625, -113927491862 / 2900518163668125,
                         58870668456604 / 3698160658676859375]
    x2 = o.mul(ax, ax)
    small = o.mul(ax, o.horner(x2, coefficients))
    threshold = 0.55 if o.bits == 32 else 0.3
    result = o.select(o.cmp("olt", ax, o.c(threshold)), small, big)
    result = o.copysign(result, x)
    nan = o.cmp("uno", x, x)
    return o.select(nan, x, result)


def _erf(o: _Ops, x: str) -> str:
    """f32 only (`expand` leaves f64 erf to libm): the rational form of Eigen's float erf,
    x p(x^2) / q(x^2) on x clamped to +-4 (erf is 1 in float beyond); 15 vector ops."""
    clamped = o.max(o.min(x, o.c(4.0)), o.c(-4.0))
    x2 = o.mul(clamped, clamped)
    p = o.horner(x2, [-1.60960333262415e-02, -2.95459980854025e-03, -7.34990630326855e-04, -5.69250639462346e-05,
                      -2.10102402082508e-06, 2.77068142495902e-08, -2.72614225801306e-10])
    q = o.horner(x2, [-1.42647390514189e-02, -7.37332916720468e-03, -1.68282697438203e-03, -2.13374055278905e-04,
                      -1.45660718464996e-05])
    return o.div(o.mul(clamped, p), q)


def _log(o: _Ops, x: str) -> str:
    e = o.e
    shift = 23 if o.bits == 32 else 52
    bias = 127 if o.bits == 32 else 1023
    mantissa_mask = (1 << shift) - 1
    # Subnormal inputs: scale by 2^shift first (exact), subtract shift from the exponent after.
    tiny = o.cmp("olt", x, o.c(2.0 ** (1 - bias)))
    xs = o.select(tiny, o.mul(x, o.c(2.0 ** shift)), x)
    bits = e.value(f"arith.bitcast {xs} : {o.t} to {o.it}", "m")
    exponent = e.value(f"arith.shrui {bits}, {o.ci(shift)} : {o.it}", "m")
    exponent = e.value(f"arith.subi {exponent}, {o.ci(bias)} : {o.it}", "m")
    mant_bits = e.value(f"arith.andi {bits}, {o.ci(mantissa_mask)} : {o.it}", "m")
    mant_bits = e.value(f"arith.ori {mant_bits}, {o.ci(bias << shift)} : {o.it}", "m")
    m = e.value(f"arith.bitcast {mant_bits} : {o.it} to {o.t}", "m")  # in [1, 2)
    k = e.value(f"arith.sitofp {exponent} : {o.it} to {o.t}", "m")
    k = o.select(tiny, o.sub(k, o.c(float(shift))), k)
    # Move m into [sqrt(1/2), sqrt(2)).
    high = o.cmp("ogt", m, o.c(math.sqrt(2.0)))
    m = o.select(high, o.mul(m, o.c(0.5)), m)
    k = o.select(high, o.add(k, o.c(1.0)), k)
    s = o.div(o.sub(m, o.c(1.0)), o.add(m, o.c(1.0)))  # |s| <= 0.1716
    s2 = o.mul(s, s)
    terms = 8 if o.bits == 32 else 16
    series = o.horner(s2, [2.0 / (2 * i + 1) for i in range(terms)])
    result = o.fma(k, o.c(math.log(2.0)), o.mul(s, series))
    # Special values: log(0) = -inf, log(x < 0) = NaN, log(inf) = inf, NaN kept; subnormals: rare, via
    # the same formula on the raw bits (inaccurate but finite).
    result = o.select(o.cmp("oeq", x, o.c(0.0)), o.c(-math.inf), result)
    result = o.select(o.cmp("oeq", x, o.c(math.inf)), x, result)
    bad = o.cmp("ult", x, o.c(0.0))  # x < 0 or NaN
    nan = o.e.value(f"arith.constant {'dense<0x7FC00000>' if o.lanes else '0x7FC00000'} : {o.t}" if o.bits == 32 else
                    f"arith.constant {'dense<0x7FF8000000000000>' if o.lanes else '0x7FF8000000000000'} : {o.t}", "m")
    return o.select(bad, nan, result)


_FUNCTIONS = {math_d.ExpOp.OPERATION_NAME: _exp, math_d.TanhOp.OPERATION_NAME: _tanh, math_d.ErfOp.OPERATION_NAME: _erf,
              math_d.LogOp.OPERATION_NAME: _log}


def expand(e: Emitter, name: str, operand: str, type_: str) -> str | None:
    """Emit `name(operand)` as arith ops on `type_` (f32/f64 scalar or vector); None if not expanded.

    `e.avx512` (the target has AVX-512) lets 512-bit vectors use vscalef in exp.
    """
    function = _FUNCTIONS.get(name)
    elem = type_.split("x")[-1].rstrip(">") if type_.startswith("vector<") else type_
    if function is None or elem not in ("f32", "f64") or (name == math_d.ErfOp.OPERATION_NAME and elem == "f64"):
        return None  # f64 erf: the libm call (the expansion's tail is only f32-accurate)
    return function(_Ops(e, type_, getattr(e, "avx512", False)), operand)
