"""Where a long collective-free segment of an SPMD function is cut into several kernels.

Two reasons to cut: LLVM's compile time grows faster than linearly in the size of one function (its
schedulers are quadratic in a basic block in the worst case), and kernels are cached one by one
(`aot.compile_kernels`), so the kernels of the repeated blocks of a deep model should come out identical and
compile once. Cuts are therefore *content-defined*, as in rsync or restic's chunking: a cut falls after a
compute op whose signature, hashed with the signatures of the few compute ops before it, hits a fixed pattern,
once the kernel has `MIN_OPS` compute ops; every `MAX_OPS` compute ops a cut is forced. Where the cuts fall
depends on the ops around them, not on their position, so every repetition of a block is cut at the same
places (after the first) and yields the same kernels. The hash is CRC-32 of the signatures' text: stable
across processes (Python's `hash` of a string is not), so every rank and every run cuts alike.

A cut costs little: the values crossing it are tensors every op writes to memory anyway; only fusion of
elementwise chains across it is lost. Segments below `MIN_OPS` compute ops are never cut (every example,
benchmark and one transformer block as before).
"""

from __future__ import annotations

import zlib
from collections import deque
from typing import Any

from mlir import ir
from mlir.dialects import linalg

from slicer.core.names import LINALG_PREFIX

MIN_OPS = 24  # compute ops in a kernel before a content-defined cut may fall
MAX_OPS = 96  # compute ops after which a cut is forced
WINDOW = 3  # compute ops whose signatures decide a cut
PATTERN = 8  # a cut falls where the window's hash is 0 modulo this (about every 8 compute ops, past MIN_OPS)


def is_compute(op: ir.Operation) -> bool:
    """An op that computes a tensor (a linalg op, fills aside): what kernels are measured in."""
    return op.name.startswith(LINALG_PREFIX) and op.name != linalg.FillOp.OPERATION_NAME


def signature(op: ir.Operation) -> str:
    """What identifies an op's computation for cutting: its name, result types and the names of its body's ops."""
    body = []
    for region in op.regions:
        for block in region.blocks:
            body += [inner.operation.name for inner in block.operations]
    return f"{op.name}:{','.join(str(r.type) for r in op.results)}:{','.join(body)}"


def cut(ops: list[ir.Operation]) -> list[list[ir.Operation]]:
    """`ops` (a collective-free segment, in order) as consecutive kernels' op lists."""
    kernels, current, window = [], [], deque[Any](maxlen=WINDOW)
    count = 0
    for op in ops:
        current.append(op)
        if not is_compute(op):
            continue
        count += 1
        window.append(zlib.crc32(signature(op).encode()))
        anchor = len(window) == WINDOW and zlib.crc32(repr(tuple(window)).encode()) % PATTERN == 0
        if count >= MAX_OPS or (count >= MIN_OPS and anchor):
            kernels.append(current)
            current, count = [], 0
    if current:
        kernels.append(current)
    return kernels
