"""The im2col patch copy as a generated function: `dst[dims...] = src[exprs(dims)]` with vector loads and stores
along the patch's innermost dim where the input is contiguous along it (`ow` of `oh + kh, ow + kw` at stride 1).

Left as a `linalg.generic`, the copy reaches the LLVM stage as scalar loops (the vectorizer tiles it into rows of
one output row but leaves the row's copy to `convert-linalg-to-loops`): in ResNet-18's first stage it was a
large share of the forward convolution's time. A row's tail is one more vector
overlapping the last (a copy may write an element twice), a row narrower than a vector a masked load and store.
A strided input (`ow * 2 + kw`) or an innermost dim read elsewhere than the input's last dim is copied element by
element.
"""

from __future__ import annotations

from ..emitter import Emitter
from ..memref_facts import VECTOR_BYTES

Linear = dict[int, int]


def patch_copy_text(name: str, src_type: str, dst_type: str, element: str, element_bytes: int,
                    src_exprs: list[Linear], dims: list[int], ranges: list[int]) -> str:
    """A private function `@name(%src, %dst)`: dst (indexed by loop `dims` in order) = src[src_exprs]."""
    e = Emitter("p")
    inner = dims[-1]
    lanes = VECTOR_BYTES // element_bytes
    contiguous = (src_exprs[-1].get(inner) == 1 and all(inner not in x for x in src_exprs[:-1]))
    extent = ranges[inner]

    def coords(point: dict) -> tuple[str, str]:
        src = e.indices(e.affine([(point[d], c) for d, c in sorted(x.items())]) for x in src_exprs)
        return src, e.indices(point[d] for d in dims)

    def scalar(point: dict, lo: int) -> None:
        with e.loop(lo, extent) as i:
            src, dst = coords({**point, inner: i})
            value = e.value(f"memref.load %src[{src}] : {src_type}")
            e.line(f"memref.store {value}, %dst[{dst}] : {dst_type}")

    def rows(level: int, point: dict) -> None:
        if level < len(dims) - 1:
            with e.loop(0, ranges[dims[level]]) as v:
                rows(level + 1, {**point, dims[level]: v})
            return
        if not contiguous:
            scalar(point, 0)
            return
        vector = f"vector<{lanes}x{element}>"

        def move(start) -> None:
            src, dst = coords({**point, inner: start})
            value = e.value(f"vector.load %src[{src}] : {src_type}, {vector}")
            e.line(f"vector.store {value}, %dst[{dst}] : {dst_type}, {vector}")

        full = extent // lanes * lanes
        if full:
            with e.loop(0, full, lanes) as i:
                move(i)
        if full and full < extent:  # the tail as one more vector overlapping the last: a copy may rewrite
            move(extent - lanes)
        elif not full:  # a row narrower than a vector (a 4x4 map): masked
            src, dst = coords({**point, inner: 0})
            mask = e.value(f"vector.constant_mask [{extent}] : vector<{lanes}xi1>")
            zero = e.value(f"arith.constant dense<0.0> : {vector}")
            value = e.value(f"vector.maskedload %src[{src}], {mask}, {zero} : {src_type}, vector<{lanes}xi1>, "
                            f"{vector} into {vector}")
            e.line(f"vector.maskedstore %dst[{dst}], {mask}, {value} : {dst_type}, vector<{lanes}xi1>, {vector}")

    rows(0, {})
    head = f"func.func private @{name}(%src: {src_type}, %dst: {dst_type}) {{"
    return "\n".join([head, e.body(), "  return", "}"])
