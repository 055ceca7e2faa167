"""Vectorizable expansions of math functions (exp, tanh, erf, log) into arith ops.

LLVM has no vector instruction for these: `llvm.exp` on `vector<16xf32>` becomes 16 calls to
`expf`, which made softmax 60x slower than a memory copy. The generated kernels (`rows.py`,
`contract.py`) emit these expansions instead; they work for scalars and vectors of f32/f64 alike.

Accuracy (test/unit/kernels/test_vector_math.py, against numpy in float64): exp, tanh, log within a few
ulp in f32 and f64 (exp: inf above the overflow bound, subnormal results kept, NaN kept; log: -inf at
0, NaN below, subnormal inputs rescaled); erf within 3 ulp in f32 (f64 erf stays a libm call: this
tail approximation is only f32-accurate). Methods: exp: n = round(x log2 e), Cody-Waite reduction, degree 6
(f32) / 13 (f64) Taylor polynomial, scaling by 2^n through the exponent bits (two steps, so results
down to the smallest normal number are exact); tanh: x for tiny |x|, an odd polynomial for |x| < 0.55,
1 - 2 / (exp(2|x|) + 1) with the sign restored above; erf: its Maclaurin series for |x| < 0.9 and
Abramowitz-Stegun 7.1.26, 1 - t P(t) exp(-x^2), above, 1 beyond 4; log: frexp-style split
into mantissa m in [sqrt(1/2), sqrt(2)) and exponent, log(m) = 2 atanh((m-1)/(m+1)) series.
"""

from __future__ import annotations

import math

from .emitter import Emitter

EXPANDED = ("math.exp", "math.tanh", "math.erf", "math.log")


class _Ops:
    """Typed arith helpers on one (scalar or vector) float type."""

    def __init__(self, e: Emitter, type_: str):
        self.e = e
        self.t = type_
        self.elem = type_.split("x")[-1].rstrip(">") if type_.startswith("vector<") else type_
        self.lanes = int(type_[len("vector<"):].split("x")[0]) if type_.startswith("vector<") else None
        self.bits = {"f32": 32, "f64": 64}[self.elem]
        self.it = f"i{self.bits}" if self.lanes is None else f"vector<{self.lanes}xi{self.bits}>"
        self.bt = "i1" if self.lanes is None else f"vector<{self.lanes}xi1>"
        self._consts: dict[str, str] = {}

    def c(self, value: float) -> str:
        text = repr(float(value)) if math.isfinite(value) else ("0x7F800000" if self.bits == 32 else "0x7FF0000000000000")
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

    def pow2(self, n: str) -> str:
        """2^n for an integral-valued float n within the normal exponent range."""
        bias = 127 if self.bits == 32 else 1023
        shift = 23 if self.bits == 32 else 52
        ni = self.e.value(f"arith.fptosi {n} : {self.t} to {self.it}", "m")
        biased = self.e.value(f"arith.addi {ni}, {self.ci(bias)} : {self.it}", "m")
        bits = self.e.value(f"arith.shli {biased}, {self.ci(shift)} : {self.it}", "m")
        return self.e.value(f"arith.bitcast {bits} : {self.it} to {self.t}", "m")


def _exp(o: _Ops, x: str) -> str:
    f32 = o.bits == 32
    hi_limit = 88.72283905206835 if f32 else 709.782712893384
    lo_limit = -103.97 if f32 else -745.2
    clamped = o.max(o.min(x, o.c(hi_limit)), o.c(lo_limit))
    n = o.round(o.mul(clamped, o.c(1.4426950408889634)))
    # Cody-Waite: ln 2 split so that n * ln2_hi is exact.
    ln2_hi, ln2_lo = (0.693145751953125, 1.428606765330187e-06) if f32 else (0.6931471803691238, 1.9082149292705877e-10)
    r = o.fma(n, o.c(-ln2_hi), clamped)
    r = o.fma(n, o.c(-ln2_lo), r)
    terms = 7 if f32 else 14
    p = o.horner(r, [1.0 / math.factorial(i) for i in range(terms)])
    # 2^n in two factors: n may go below the smallest normal exponent (results down to 2^-149).
    half = o.round(o.mul(n, o.c(0.5)))
    scaled = o.mul(o.mul(p, o.pow2(half)), o.pow2(o.sub(n, half)))
    big = o.cmp("ogt", x, o.c(hi_limit))
    scaled = o.select(big, o.c(math.inf), scaled)
    nan = o.cmp("uno", x, x)
    return o.select(nan, x, scaled)


def _tanh(o: _Ops, x: str) -> str:
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
    ax = o.abs(x)
    # |x| < 0.9: 2/sqrt(pi) * sum (-1)^n x^(2n+1) / (n! (2n+1))
    terms = 12 if o.bits == 32 else 22
    series = [2 / math.sqrt(math.pi) * (-1) ** k / (math.factorial(k) * (2 * k + 1)) for k in range(terms)]
    x2 = o.mul(ax, ax)
    small = o.mul(ax, o.horner(x2, series))
    # |x| >= 0.9: erfc via a continued-fraction-free rational form: erfc(x) = exp(-x^2) * t * P(t),
    # t = 1 / (1 + p x) (Abramowitz-Stegun 7.1.26 family), refined coefficients for the range used.
    t = o.div(o.c(1.0), o.fma(o.c(0.3275911), ax, o.c(1.0)))
    poly = o.horner(t, [0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429])
    erfc = o.mul(o.mul(t, poly), _exp(o, o.neg(x2)))
    big = o.sub(o.c(1.0), erfc)
    result = o.select(o.cmp("olt", ax, o.c(0.9)), small, big)
    limit = 4.0 if o.bits == 32 else 6.0
    result = o.select(o.cmp("ogt", ax, o.c(limit)), o.c(1.0), result)
    result = o.copysign(result, x)
    nan = o.cmp("uno", x, x)
    return o.select(nan, x, result)


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


_FUNCTIONS = {"math.exp": _exp, "math.tanh": _tanh, "math.erf": _erf, "math.log": _log}


def expand(e: Emitter, name: str, operand: str, type_: str) -> str | None:
    """Emit `name(operand)` as arith ops on `type_` (f32/f64 scalar or vector); None if not expanded."""
    function = _FUNCTIONS.get(name)
    elem = type_.split("x")[-1].rstrip(">") if type_.startswith("vector<") else type_
    if function is None or elem not in ("f32", "f64") or (name == "math.erf" and elem == "f64"):
        return None  # f64 erf: the libm call (the expansion's tail is only f32-accurate)
    return function(_Ops(e, type_), operand)
