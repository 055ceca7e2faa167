"""MLIR text shared by the benchmarks' programs (one definition of each formula)."""


def tanh_gelu(x: str, out: str, indent: str = "    ") -> str:
    """Lines of a `linalg.generic` body computing `%out = gelu(%x)` in its tanh form (GPT-2's):
    0.5 x (1 + tanh(0.7978845608 (x + 0.044715 x^3))), f32."""
    lines = [
        "%c0 = arith.constant 0.044715 : f32",
        "%c1 = arith.constant 0.7978845608 : f32",
        "%half = arith.constant 0.5 : f32",
        "%one = arith.constant 1.0 : f32",
        f"%v2 = arith.mulf %{x}, %{x} : f32",
        f"%v3 = arith.mulf %v2, %{x} : f32",
        "%t0 = arith.mulf %v3, %c0 : f32",
        f"%t1 = arith.addf %{x}, %t0 : f32",
        "%t2 = arith.mulf %t1, %c1 : f32",
        "%th = math.tanh %t2 : f32",
        "%t3 = arith.addf %th, %one : f32",
        "%t4 = arith.mulf %t3, %half : f32",
        f"%{out} = arith.mulf %t4, %{x} : f32",
    ]
    return "".join(f"{indent}{line}\n" for line in lines)
