"""A training step written by hand as linalg MLIR, without torch: one SGD-with-momentum step of a 2-layer MLP
`relu(x @ w1^T + b1) @ w2^T + b2` under the loss `0.5 * sum((out - t)^2) / B`, shaped like the ImportedProgram
`slicer.training_step` makes (weights [out, in] as torch's nn.Linear; arguments named and given roles; results
`loss`, then the new parameters and state under their arguments' names). `numpy_step` is its reference.
"""

from __future__ import annotations

import numpy as np

from slicer.frontends import ImportedProgram

B, D, H, OUT = 8, 8, 16, 8
LR, MU = 0.1, 0.9
PARAMS = {"fc1.weight": (H, D), "fc1.bias": (H,), "fc2.weight": (OUT, H), "fc2.bias": (OUT,)}
INPUTS = {"x": (B, D), "t": (B, OUT)}
STATE = {f"momentum.{p}": s for p, s in PARAMS.items()} | {"step": ()}

ARG_NAMES = (*INPUTS, *PARAMS, *STATE)
ARG_ROLES = ("input",) * len(INPUTS) + ("parameter",) * len(PARAMS) + ("state",) * len(STATE)
RESULT_NAMES = ("loss", *PARAMS, *STATE)
SHAPES = INPUTS | PARAMS | STATE


def _t(shape) -> str:
    return f"tensor<{'x'.join(map(str, shape))}{'x' if shape else ''}f32>"


def _map(dims: str, of: str) -> str:
    return f"affine_map<({', '.join(dims)}) -> ({', '.join(of)})>"


def _generic(out, ins, maps, iters, shape, body, init=None) -> list[str]:
    """`%out = linalg.generic` over `ins` (name -> shape) into a fresh (or `init`) tensor of `shape`; `body` uses
    %a0, %a1, ... for the inputs and %acc for the output element."""
    lines = []
    if init is None:
        lines.append(f"  %{out}_e = tensor.empty() : {_t(shape)}")
        init = f"%{out}_e"
    args = ", ".join(f"%a{i}: f32" for i in range(len(ins)))
    lines += [
        f"  %{out} = linalg.generic {{indexing_maps = [{', '.join(maps)}], iterator_types = "
        f"[{', '.join(repr(i).replace(chr(39), chr(34)) for i in iters)}]}}",
        f"      ins({', '.join('%' + n for n, _ in ins)} : {', '.join(_t(s) for _, s in ins)}) "
        f"outs({init} : {_t(shape)}) {{",
        f"  ^bb0({args}{', ' if args else ''}%acc: f32):",
        *(f"    {line}" for line in body),
        f"  }} -> {_t(shape)}",
    ]
    return lines


def _zeros(out, shape) -> list[str]:
    return [f"  %{out}_e = tensor.empty() : {_t(shape)}",
            f"  %{out} = linalg.fill ins(%zero : f32) outs(%{out}_e : {_t(shape)}) -> {_t(shape)}"]


def _matmul(out, a, b, dims, a_of, b_of, out_of, shape, shapes) -> list[str]:
    """A contraction out[out_of] += a[a_of] * b[b_of] over the loops `dims` (the last ones reduce)."""
    iters = ["parallel" if d in out_of else "reduction" for d in dims]
    maps = [_map(dims, a_of), _map(dims, b_of), _map(dims, out_of)]
    body = ["%m = arith.mulf %a0, %a1 : f32", "%s = arith.addf %acc, %m : f32", "linalg.yield %s : f32"]
    return _zeros(f"{out}_z", shape) + _generic(out, [(a, shapes[a]), (b, shapes[b])], maps, iters, shape, body,
                                                init=f"%{out}_z")


def _elementwise(out, ins, shape, shapes, body, bias_of=None) -> list[str]:
    dims = "ij"[: len(shape)]
    maps = [_map(dims, bias_of if (bias_of and len(shapes[n]) == 1) else dims) for n in ins] + [_map(dims, dims)]
    return _generic(out, [(n, shapes[n]) for n in ins], maps, ["parallel"] * len(shape), shape, body)


def _sum_rows(out, src, shape_in, shapes) -> list[str]:
    """out[j] = sum_i src[i, j]."""
    maps = [_map("ij", "ij"), _map("ij", "j")]
    body = ["%s = arith.addf %acc, %a0 : f32", "linalg.yield %s : f32"]
    return _zeros(f"{out}_z", (shape_in[1],)) + _generic(out, [(src, shape_in)], maps, ["reduction", "parallel"],
                                                        (shape_in[1],), body, init=f"%{out}_z")


def _ssa(name: str) -> str:
    return name.replace(".", "_")


def program_text() -> str:
    s = {_ssa(n): v for n, v in SHAPES.items()}
    s |= {"h": (B, H), "hb": (B, H), "a": (B, H), "o": (B, OUT), "ob": (B, OUT), "d": (B, OUT), "go": (B, OUT),
          "gw2": (OUT, H), "gb2": (OUT,), "ga": (B, H), "gh": (B, H), "gw1": (H, D), "gb1": (H,)}
    lines = ["  %zero = arith.constant 0.0 : f32", f"  %lr = arith.constant {LR} : f32",
             f"  %mu = arith.constant {MU} : f32", f"  %inv_b = arith.constant {1.0 / B} : f32",
             "  %half = arith.constant 0.5 : f32", "  %one = arith.constant 1.0 : f32"]
    lines += _matmul("h", "x", "fc1_weight", "bhd", "bd", "hd", "bh", (B, H), s)
    lines += _elementwise("hb", ["h", "fc1_bias"], (B, H), s,
                          ["%v = arith.addf %a0, %a1 : f32", "linalg.yield %v : f32"], bias_of="j")
    lines += _elementwise("a", ["hb"], (B, H), s, ["%v = arith.maximumf %a0, %zero : f32", "linalg.yield %v : f32"])
    lines += _matmul("o", "a", "fc2_weight", "boh", "bh", "oh", "bo", (B, OUT), s)
    lines += _elementwise("ob", ["o", "fc2_bias"], (B, OUT), s,
                          ["%v = arith.addf %a0, %a1 : f32", "linalg.yield %v : f32"], bias_of="j")
    lines += _elementwise("d", ["ob", "t"], (B, OUT), s, ["%v = arith.subf %a0, %a1 : f32", "linalg.yield %v : f32"])
    # loss = 0.5 / B * sum(d^2), a 0-d tensor
    lines += _zeros("loss_z", ())
    lines += _generic("loss_s", [("d", (B, OUT))], [_map("ij", "ij"), _map("ij", "")], ["reduction", "reduction"], (),
                      ["%q = arith.mulf %a0, %a0 : f32", "%v = arith.addf %acc, %q : f32", "linalg.yield %v : f32"],
                      init="%loss_z")
    s["loss_s"] = ()
    lines += _generic("loss", [("loss_s", ())], [_map("", ""), _map("", "")], [], (),
                      ["%v = arith.mulf %a0, %half : f32", "%w = arith.mulf %v, %inv_b : f32", "linalg.yield %w : f32"])
    lines += _elementwise("go", ["d"], (B, OUT), s, ["%v = arith.mulf %a0, %inv_b : f32", "linalg.yield %v : f32"])
    lines += _matmul("gw2", "go", "a", "ohb", "bo", "bh", "oh", (OUT, H), s)
    lines += _sum_rows("gb2", "go", (B, OUT), s)
    lines += _matmul("ga", "go", "fc2_weight", "bho", "bo", "oh", "bh", (B, H), s)
    lines += _elementwise("gh", ["ga", "hb"], (B, H), s, [
        "%p = arith.cmpf ogt, %a1, %zero : f32", "%v = arith.select %p, %a0, %zero : f32", "linalg.yield %v : f32"])
    lines += _matmul("gw1", "gh", "x", "hdb", "bh", "bd", "hd", (H, D), s)
    lines += _sum_rows("gb1", "gh", (B, H), s)
    results = ["%loss"]
    updates = []
    for param, grad in (("fc1.weight", "gw1"), ("fc1.bias", "gb1"), ("fc2.weight", "gw2"), ("fc2.bias", "gb2")):
        p, m, shape = _ssa(param), _ssa(f"momentum.{param}"), PARAMS[param]
        s[f"new_{m}"] = shape
        lines += _elementwise(f"new_{m}", [m, grad], shape, s, [
            "%v = arith.mulf %a0, %mu : f32", "%w = arith.addf %v, %a1 : f32", "linalg.yield %w : f32"])
        lines += _elementwise(f"new_{p}", [p, f"new_{m}"], shape, s, [
            "%v = arith.mulf %a1, %lr : f32", "%w = arith.subf %a0, %v : f32", "linalg.yield %w : f32"])
        results.append(f"%new_{p}")
        updates.append(f"%new_{m}")
    lines += _generic("new_step", [("step", ())], [_map("", ""), _map("", "")], [], (),
                      ["%v = arith.addf %a0, %one : f32", "linalg.yield %v : f32"])
    results += updates + ["%new_step"]
    args = ", ".join(f"%{_ssa(n)}: {_t(SHAPES[n])} {{slicer.name = \"{n}\"}}" for n in ARG_NAMES)
    res = ", ".join(f"{_t(SHAPES.get(n, ()))} {{slicer.name = \"{n}\"}}" for n in RESULT_NAMES)
    types = ", ".join(_t(SHAPES.get(n, ())) for n in RESULT_NAMES)
    return "\n".join([f"func.func @train_step({args}) -> ({res}) {{", *lines,
                      f"  return {', '.join(results)} : {types}", "}", ""])


def step_program(arrays: dict[str, np.ndarray] | None = None) -> ImportedProgram:
    """The step as an ImportedProgram: inputs x and t, then the parameters and state bound to `arrays`."""
    arrays = arrays or random_arrays()
    bound = tuple(arrays[n] for n in ARG_NAMES[len(INPUTS):])
    return ImportedProgram(program_text(), ARG_NAMES, len(INPUTS), bound, "train_step", "a hand-written MLP step",
                           result_names=RESULT_NAMES, arg_roles=ARG_ROLES)


def random_arrays(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    arrays = {n: rng.standard_normal(shape).astype(np.float32) * 0.5 for n, shape in SHAPES.items()}
    arrays["step"] = np.array(3.0, np.float32)
    return arrays


def numpy_step(a: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The step in numpy (float64), results by name."""
    f = {n: np.asarray(v, np.float64) for n, v in a.items()}
    hb = f["x"] @ f["fc1.weight"].T + f["fc1.bias"]
    act = np.maximum(hb, 0)
    d = act @ f["fc2.weight"].T + f["fc2.bias"] - f["t"]
    out = {"loss": 0.5 * (d * d).sum() / B}
    go = d / B
    gh = (go @ f["fc2.weight"]) * (hb > 0)
    grads = {"fc1.weight": gh.T @ f["x"], "fc1.bias": gh.sum(0), "fc2.weight": go.T @ act, "fc2.bias": go.sum(0)}
    for p, g in grads.items():
        m = MU * f[f"momentum.{p}"] + g
        out[f"momentum.{p}"], out[p] = m, f[p] - LR * m
    out["step"] = f["step"] + 1
    return out
