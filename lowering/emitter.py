"""A small MLIR text builder for the generated kernels (`contract.py`, `rows.py`).

Index arithmetic folds when both sides are Python ints, so static shapes give
static loops and offsets; SSA index values are strings. Index constants are
collected and printed once at the top of the function.
"""

from __future__ import annotations

from contextlib import contextmanager

from mlir import ir
from mlir.dialects import func as func_d

from slicer.core.errors import KernelError
from slicer.core.host import cpu_flags
from slicer.core.names import TARGET_AVX512_ATTR

Index = int | str

# Module attribute set by `aot.compile_library` from its Target: whether the kernels may use AVX-512.
TARGET_AVX512 = TARGET_AVX512_ATTR


def host_has_avx512() -> bool:
    return "avx512f" in cpu_flags()


def module_avx512(module) -> bool:
    """The target's AVX-512 flag recorded on `module`, or this host's when the module has none."""
    attributes = module.operation.attributes
    if TARGET_AVX512 in attributes:
        return str(attributes[TARGET_AVX512]) == "true"
    return host_has_avx512()


class Emitter:
    """Lines of one function body, fresh SSA names, hoisted index constants."""

    def __init__(self, prefix: str = "v"):
        self.lines: list[str] = []
        self.depth = 1
        self.count = 0
        self.prefix = prefix
        self.constants: dict[int, str] = {}
        self.avx512 = False  # the target has AVX-512 (vector_math may use its instructions)

    # -- text ------------------------------------------------------------------------------------
    def fresh(self, hint: str = "") -> str:
        self.count += 1
        return f"%{self.prefix}{hint}{self.count}"

    def line(self, text: str) -> None:
        self.lines.append("  " * self.depth + text)

    def value(self, text: str, hint: str = "") -> str:
        """Emit `%new = text` and return `%new`."""
        name = self.fresh(hint)
        self.line(f"{name} = {text}")
        return name

    def body(self) -> str:
        consts = [f"  {name} = arith.constant {value} : index" for value, name in sorted(self.constants.items())]
        return "\n".join(consts + self.lines)

    # -- index arithmetic (folded when static) ---------------------------------------------------
    def idx(self, value: Index) -> str:
        if isinstance(value, str):
            return value
        if value not in self.constants:
            self.constants[value] = f"%c{value}" if value >= 0 else f"%cm{-value}"
        return self.constants[value]

    def add(self, a: Index, b: Index) -> Index:
        if isinstance(a, int) and isinstance(b, int):
            return a + b
        if b == 0:
            return a
        if a == 0:
            return b
        return self.value(f"arith.addi {self.idx(a)}, {self.idx(b)} : index", "i")

    def sub(self, a: Index, b: Index) -> Index:
        if isinstance(a, int) and isinstance(b, int):
            return a - b
        if b == 0:
            return a
        return self.value(f"arith.subi {self.idx(a)}, {self.idx(b)} : index", "i")

    def mul(self, a: Index, b: Index) -> Index:
        if isinstance(a, int) and isinstance(b, int):
            return a * b
        if a == 0 or b == 0:
            return 0
        if b == 1:
            return a
        if a == 1:
            return b
        return self.value(f"arith.muli {self.idx(a)}, {self.idx(b)} : index", "i")

    def min(self, a: Index, b: Index) -> Index:
        if isinstance(a, int) and isinstance(b, int):
            return min(a, b)
        return self.value(f"arith.minsi {self.idx(a)}, {self.idx(b)} : index", "i")

    def affine(self, terms: list[tuple[Index, int]], constant: int = 0) -> Index:
        """sum(value * coefficient) + constant."""
        total: Index = constant
        for value, coefficient in terms:
            total = self.add(total, self.mul(value, coefficient))
        return total

    # -- structure -------------------------------------------------------------------------------
    @contextmanager
    def loop(self, lo: Index, hi: Index, step: int = 1):
        """`scf.for` yielding its induction variable; no loop for a single static iteration."""
        if isinstance(lo, int) and isinstance(hi, int):
            if hi - lo <= 0:
                raise KernelError(f"generated kernel: a loop from {lo} to {hi} has no iterations "
                                  "(a generator asked for an empty static loop; it must skip the loop instead)")
            if hi - lo <= step:
                yield lo
                return
        iv = self.fresh("k")
        self.line(f"scf.for {iv} = {self.idx(lo)} to {self.idx(hi)} step {self.idx(step)} {{")
        self.depth += 1
        try:
            yield iv
        finally:
            self.depth -= 1
            self.line("}")

    @contextmanager
    def loop_carried(self, lo: Index, hi: Index, step: int, inits: list[str], type_: str, results: list[str]):
        """`scf.for` carrying `inits` (all of `type_`); yields (iv, carried names); the caller fills `results`
        with the yielded values before leaving; afterwards `results` holds the loop's result names."""
        iv = self.fresh("k")
        tag = iv[1:]
        carried = [f"%{tag}_a{i}" for i in range(len(inits))]
        out = self.fresh("r")
        args = ", ".join(f"{c} = {v}" for c, v in zip(carried, inits))
        types = ", ".join([type_] * len(inits))
        self.line(f"{out}:{len(inits)} = scf.for {iv} = {self.idx(lo)} to {self.idx(hi)} step {self.idx(step)} "
                  f"iter_args({args}) -> ({types}) {{")
        self.depth += 1
        yield iv, carried
        self.line(f"scf.yield {', '.join(results)} : {types}")
        self.depth -= 1
        self.line("}")
        results[:] = [f"{out}#{i}" for i in range(len(inits))]

    @contextmanager
    def if_(self, condition: str):
        """`scf.if condition { ... }` (no results)."""
        self.line(f"scf.if {condition} {{")
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1
            self.line("}")

    def if_else(self, condition: str):
        """`scf.if condition { then } else { other }`: returns two context managers used in order."""
        emitter = self

        @contextmanager
        def then():
            emitter.line(f"scf.if {condition} {{")
            emitter.depth += 1
            yield
            emitter.depth -= 1

        @contextmanager
        def otherwise():
            emitter.line("} else {")
            emitter.depth += 1
            yield
            emitter.depth -= 1
            emitter.line("}")

        return then(), otherwise()

    def cmp(self, predicate: str, a: Index, b: Index) -> str | bool:
        if isinstance(a, int) and isinstance(b, int):
            return {"slt": a < b, "sle": a <= b, "eq": a == b, "ne": a != b, "sgt": a > b, "sge": a >= b}[predicate]
        return self.value(f"arith.cmpi {predicate}, {self.idx(a)}, {self.idx(b)} : index", "b")

    def indices(self, values) -> str:
        return ", ".join(self.idx(v) for v in values)


class GeneratedFunctions:
    """The private functions a code generator adds to a module, one per distinct body: a generator writes each
    function's text with `SELF` as its name, and asks `name_of` for the symbol to call. Identical bodies (the
    same row loop or GEMM in several kernels of a module: kernels are built together, `aot`) get one function:
    a 2-block GPT training step's 46 kernels had 331 functions after generation, 109 of them copies, which the
    rest of the pipeline and LLVM's code generation compiled again each time (a third of the object code)."""

    SELF = "__slicer_generated_self"

    def __init__(self, prefix: str):
        self.prefix = prefix
        self.names: dict[str, str] = {}  # text with SELF as its name -> the function's symbol

    def name_of(self, text: str) -> str:
        name = self.names.get(text)
        if name is None:
            name = self.names[text] = f"{self.prefix}{len(self.names)}"
        return name

    def texts(self) -> list[str]:
        """Each distinct function's text under its own name."""
        return [text.replace(f"@{self.SELF}(", f"@{name}(", 1) for text, name in self.names.items()]

    def add_to(self, module, *shared: str) -> None:
        """Append to `module` (an `ir.Module`) the functions `shared` (texts under their own names: the
        micro-kernels several functions call) and then each distinct function."""
        generated = ir.Module.parse("\n".join([*shared, *self.texts()]), module.context)
        for fn in list(generated.body.operations):
            module.body.append(fn.operation)


def call_instead(op, name: str, operands) -> None:
    """Replace `op` (a bufferized op: no results) by a call of the generated function `name` on `operands`."""
    with ir.InsertionPoint(op), op.location:
        func_d.CallOp([], ir.FlatSymbolRefAttr.get(name), list(operands))
    op.erase()
