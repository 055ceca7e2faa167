"""``slicer-plan``: synthesise, print and optionally check a redistribution plan.

Example: ``slicer-plan --mesh x=2,y=4 --shape 1024x1024 --src '[[x],[y]]' --dst '[[y],[x]]' [--json] [--check]``.
Bad input exits 1 with ``slicer-plan: error: <message>`` on stderr (never a traceback).
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from slicer.core.dtypes import NUMPY_DTYPES
from slicer.core.errors import RedistributionError
from slicer.core.mesh import Mesh
from slicer.redistribution import DistType, numpy_dtype, parse_shape, plan, simulate

#: Above this many elements ``--check`` simulates on a smaller array with the same types.
CHECK_LIMIT = 1 << 24


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse exits 2 by default; every bad input exits 1 here
        self.print_usage(sys.stderr)
        self.exit(1, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="slicer-plan", description="Plan a memory-bounded redistribution of a distributed array.")
    p.add_argument("--mesh", required=True, help="mesh axes in order, e.g. x=2,y=4")
    p.add_argument("--shape", required=True, help="global shape, e.g. 1024x1024")
    p.add_argument("--dtype", default="f32", help=f"element type: {', '.join(NUMPY_DTYPES)} (default f32)")
    p.add_argument("--src", required=True, help="source type, axes major to minor, e.g. '[[x],[y]]' or "
                                                "'[[x],[]] partial=[y]'")
    p.add_argument("--dst", required=True, help="target type, e.g. '[[y],[x]]'")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.add_argument("--check", action="store_true", help="run the whole-mesh simulator; exit 2 on a mismatch")
    return p


def _check_shape(shape: tuple[int, ...], mesh: Mesh, src: DistType, dst: DistType) -> tuple[int, ...]:
    """The shape to simulate: the real one, or the smallest multiple of the tile counts if it is huge."""
    if int(np.prod(shape, dtype=np.int64)) <= CHECK_LIMIT:
        return shape
    out = []
    for size, a, b in zip(shape, src.dims, dst.dims):
        ka, kb = mesh.group_size(a), mesh.group_size(b)
        out.append(min(size, ka * kb // int(np.gcd(ka, kb))))
    return tuple(out)


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        mesh = Mesh.parse(args.mesh)
        shape = parse_shape(args.shape)
        numpy_dtype(args.dtype)
        src = DistType.parse(args.src, shape, mesh)
        dst = DistType.parse(args.dst, shape, mesh)
        result = plan(mesh, src, dst, dtype=args.dtype)
    except RedistributionError as exc:
        print(f"slicer-plan: error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(result.to_json())
    else:
        print(result)
    if args.check:
        small = _check_shape(shape, mesh, src, dst)
        checked = result if small == shape else plan(
            mesh, DistType.of(mesh, small, src.dims, src.partial), DistType.of(mesh, small, dst.dims, dst.partial),
            dtype=args.dtype)
        try:
            simulate(checked)
        except RedistributionError as exc:
            print(f"slicer-plan: check failed: {exc}", file=sys.stderr)
            return 2
        note = "" if small == shape else f" (simulated at shape {'x'.join(map(str, small))})"
        print(f"check: ok, every device holds its target block{note}", file=sys.stderr if args.json else sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
