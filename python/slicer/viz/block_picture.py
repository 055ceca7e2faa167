"""Which device holds which block of a distributed array: as text for terminals, and as a PNG.

In the spirit of `jax.debug.visualize_array_sharding`, for N-D arrays on N-D meshes. The array is drawn as a
grid of its blocks over two of its dims (the tiled ones first; a 1-D array is one row); every other dim that
is tiled gives one facet per block index (`dim 0 = 0:4`). Each cell lists the devices (linear ranks, row-major
over the mesh axes) holding that block: `0,2` are replicas (the same block on both), `0 + 1` are partial sums
(the block is the sum of theirs), and `0,2 + 1,3` both. A value computed in a loop body (`varying` axes) is
one member of the loop's family per coordinate on those axes: one facet per member, over its devices.

    picture = BlockPicture(mesh, dist, title="argument #1 %w1: f32[16, 32]")
    print(picture.text())
    picture.png("w1.png")            # needs matplotlib (pip install 'slicer[viz]')
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from slicer.core.errors import VizError
from slicer.core.mesh import Mesh, block_size, block_sizes
from slicer.redistribution import DistType, subaxes
from slicer.redistribution.layout import Layout, complement

MAX_FACETS = 16  # facets drawn; the rest are counted


def device_ranges(ranks) -> str:
    """`[0, 1, 2, 5]` -> `0-2,5`."""
    ranks = sorted(int(r) for r in ranks)
    parts, start = [], None
    for i, r in enumerate(ranks):
        if start is None:
            start = r
        if i + 1 == len(ranks) or ranks[i + 1] != r + 1:
            parts.append(str(start) if start == r else f"{start}{',' if r == start + 1 else '-'}{r}")
            start = None
    return ",".join(parts)


def load_pyplot():
    """matplotlib.pyplot with a file-only backend, or `VizError` saying how to install it."""
    try:
        import matplotlib  # optional: only the PNG files need it
    except ImportError:
        raise VizError("PNG pictures need matplotlib: pip install 'slicer[viz]' (or pip install matplotlib); the "
                       "text pictures (Program.show, slicer-run --show) need nothing") from None
    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt  # optional, as above

    return plt


@dataclass(frozen=True)
class Cell:
    """One block: its index per dim, and the devices holding it, grouped by partial-sum contribution."""

    index: tuple[int, ...]
    contributions: tuple[tuple[int, ...], ...]  # each: the replicas holding that contribution

    def label(self) -> str:
        return " + ".join(device_ranges(c) for c in self.contributions)


def uneven_dims(mesh: Mesh, dist: DistType, shape) -> list[str]:
    """Each dim whose logical size (`shape`) is less than `dist`'s padded one, with every device's valid rows:
    ``dim 0: 3 over x=2: blocks 2, 1`` (docs/partition.md, "Uneven shapes")."""
    out = []
    for d, (n, padded, axes) in enumerate(zip(shape, dist.shape, dist.dims)):
        if n != padded:
            k = subaxes.group_size(mesh, axes)
            over = ",".join(f"{a}={subaxes.size(mesh, a)}" for a in axes)
            out.append(f"dim {d}: {n} over {over}: blocks {', '.join(map(str, block_sizes(n, k)))} "
                       f"(each padded to {block_size(n, k)})")
    return out


class BlockPicture:
    """The blocks of an array of type `dist` on `mesh` and the devices holding each (module docstring).
    `shape`: the array's logical shape when `dist`'s is padded (uneven dims: the last blocks hold fewer rows)."""

    def __init__(self, mesh: Mesh, dist: DistType, *, title: str = "", notes: tuple[str, ...] = (),
                 dtype_size: int | None = None, grid_dims: tuple[int, ...] | None = None,
                 varying: tuple[str, ...] = (), shape: tuple[int, ...] | None = None):
        self.mesh, self.dist, self.title, self.notes, self.dtype_size = mesh, dist, title, tuple(notes), dtype_size
        self.shape = tuple(dist.shape if shape is None else shape)
        self.varying = tuple(a for a in mesh.axis_names if a in varying)
        self.layout = Layout.get(mesh, dist.shape)
        self.counts = tuple(subaxes.group_size(mesh, d) for d in dist.dims)  # dims may use sub-axes (y:(2)2)
        self.block = dist.local_shape(mesh)
        self.grid_dims = self._grid_dims() if grid_dims is None else tuple(grid_dims)
        if any(not 0 <= d < dist.rank for d in self.grid_dims) or len(set(self.grid_dims)) != len(self.grid_dims) \
                or len(self.grid_dims) > 2:
            raise VizError(f"grid_dims {list(self.grid_dims)}: give at most two distinct dims of the rank-{dist.rank} "
                           "array")
        self.facet_dims = tuple(d for d in range(dist.rank) if d not in self.grid_dims and self.counts[d] > 1)

    def _grid_dims(self) -> tuple[int, ...]:
        rank = self.dist.rank
        tiled = [d for d in range(rank) if self.counts[d] > 1]
        if len(tiled) > 2:
            tiled = sorted(tiled, key=lambda d: -self.counts[d])[:2]
        chosen = set(tiled)
        for d in reversed(range(rank)):
            if len(chosen) >= min(2, rank):
                break
            chosen.add(d)
        return tuple(sorted(chosen))

    @cached_property
    def member_cells(self) -> dict[tuple[int, tuple[int, ...]], Cell]:
        """(member, block index per dim) -> the cell; the member is the index over the varying axes (0 when
        there are none)."""
        layout, mesh = self.layout, self.mesh
        per_dim = [layout.group_index(d) for d in self.dist.dims]
        contribution = layout.group_index(tuple(a for a in self.dist.partial if subaxes.size(mesh, a) > 1))
        member = layout.group_index(self.varying)
        holders: dict[tuple, dict[int, list[int]]] = {}
        for rank in range(mesh.device_count):
            key = (int(member[rank]), tuple(int(g[rank]) for g in per_dim))
            holders.setdefault(key, {}).setdefault(int(contribution[rank]), []).append(rank)
        return {key: Cell(key[1], tuple(tuple(by[k]) for k in sorted(by))) for key, by in holders.items()}

    @property
    def cells(self) -> dict[tuple[int, ...], Cell]:
        """Block index (one per dim) -> the cell (of the first member, for a varying value)."""
        return {index: cell for (member, index), cell in self.member_cells.items() if member == 0}

    # -- words ---------------------------------------------------------------------------------------------
    def describe(self) -> list[str]:
        mesh, dist = self.mesh, self.dist
        dims = []
        for d, (size, axes) in enumerate(zip(self.shape, dist.dims)):
            blocks = (f"{self.counts[d]} blocks of {self.block[d]} over {','.join(axes)}" if size == dist.shape[d]
                      else f"{self.counts[d]} blocks over {','.join(axes)} holding "
                           f"{', '.join(map(str, block_sizes(size, self.counts[d])))}, each padded to {self.block[d]}")
            dims.append(f"dim {d} ({size}): " + (blocks if axes else "whole"))
        used = tuple(dist.used_axes() | set(self.varying))
        replicated = [a for a in complement(mesh, used) if subaxes.size(mesh, a) > 1]
        partial = [a for a in dist.partial if subaxes.size(mesh, a) > 1]
        block = (f"{self.block[0]}-element" if len(self.block) == 1 else "x".join(map(str, self.block))) or "scalar"
        nbytes = f" ({int(np.prod(self.block, dtype=np.int64)) * self.dtype_size} B)" if self.dtype_size else ""
        holding = f"each device holds one {block} block{nbytes}"
        if self.shape != tuple(dist.shape):
            holding += " (padding included: the last blocks of an uneven dim hold fewer rows)"
        copies = subaxes.group_size(mesh, replicated)
        holding += (f"; each block is on {copies} devices (replicated over {','.join(replicated)})" if replicated
                    else "; no two devices hold the same block")
        lines = ["; ".join(dims) if dims else "a scalar", holding]
        if self.varying:
            lines.append(f"one member of a loop's family per {','.join(self.varying)} coordinate: devices that differ "
                         "there hold different members (one facet each)")
        if partial:
            lines.append(f"partial sums over {','.join(partial)}: a block is the sum of the blocks of the devices "
                         "joined by +")
        return lines

    def legend(self) -> str:
        mesh = self.mesh
        if mesh.ndim == 1:
            return f"device = its {mesh.axis_names[0]} coordinate"
        terms, stride = [], 1
        for name, size in reversed(mesh.axes):
            terms.append(name if stride == 1 else f"{name}*{stride}")
            stride *= size
        text = f"device = {' + '.join(reversed(terms))} (mesh {mesh})"
        if mesh.device_count <= 16:
            coords = " ".join(f"{r}=({','.join(map(str, mesh.coords(r)))})" for r in range(mesh.device_count))
            text += f": {coords}"
        return text

    # -- facets --------------------------------------------------------------------------------------------
    def _span(self, dim: int, index: int) -> str:
        n = self.shape[dim]  # an uneven dim's last blocks end at its logical size
        return f"{min(n, index * self.block[dim])}:{min(n, (index + 1) * self.block[dim])}"

    def _member_name(self, member: int) -> str:
        coords, rest = [], member
        for axis in reversed(self.varying):
            coords.append(f"{axis}={rest % self.mesh.size(axis)}")
            rest //= self.mesh.size(axis)
        return "member " + ",".join(reversed(coords))

    def facets(self) -> list[tuple[str, dict]]:
        """(title, {block index in the grid dims: cell}) per member and combination of the facet dims' block
        indices."""
        out = []
        for member in range(self.mesh.group_size(self.varying)):
            for combo in itertools.product(*(range(self.counts[d]) for d in self.facet_dims)):
                fixed = dict(zip(self.facet_dims, combo))
                title = ", ".join(([self._member_name(member)] if self.varying else [])
                                  + [f"dim {d} = {self._span(d, i)}" for d, i in fixed.items()])
                grid = {}
                for (m, index), cell in self.member_cells.items():
                    if m == member and all(index[d] == i for d, i in fixed.items()):
                        grid[tuple(index[d] for d in self.grid_dims)] = cell
                out.append((title, grid))
        return out

    def _axes_of_grid(self) -> tuple[int | None, int | None]:
        """(row dim, column dim) of the grid; None where the grid has fewer dims."""
        if len(self.grid_dims) == 2:
            return self.grid_dims[0], self.grid_dims[1]
        if len(self.grid_dims) == 1:
            return None, self.grid_dims[0]
        return None, None

    # -- text ----------------------------------------------------------------------------------------------
    def text(self) -> str:
        lines = [self.title or f"{list(self.shape)} as {self.dist} on mesh {self.mesh}"]
        lines += ["  " + line for line in (*self.notes, *self.describe())]
        lines.append("  " + self.legend())
        facets = self.facets()
        for title, grid in facets[:MAX_FACETS]:
            if title:
                lines.append(f"  {title}:")
            lines += ["  " + line for line in self._grid_text(grid)]
        if len(facets) > MAX_FACETS:
            lines.append(f"  ... {len(facets) - MAX_FACETS} more facets (dims {list(self.facet_dims)})")
        return "\n".join(lines)

    def _grid_text(self, grid: dict) -> list[str]:
        row_dim, col_dim = self._axes_of_grid()
        rows = self.counts[row_dim] if row_dim is not None else 1
        cols = self.counts[col_dim] if col_dim is not None else 1
        row_names = [self._span(row_dim, r) if row_dim is not None else "" for r in range(rows)]
        col_names = [self._span(col_dim, c) if col_dim is not None else "" for c in range(cols)]

        def at(r: int, c: int) -> str:
            key = tuple(i for i, d in ((r, row_dim), (c, col_dim)) if d is not None)
            return grid[key].label()

        widths = [max(len(col_names[c]), *(len(at(r, c)) for r in range(rows))) + 2 for c in range(cols)]
        margin = max(len(n) for n in row_names) + 1
        out = []
        if col_dim is not None:
            out.append(f"columns: dim {col_dim}" + (f", rows: dim {row_dim}" if row_dim is not None else ""))
            out.append(" " * margin + " " + " ".join(n.center(w) for n, w in zip(col_names, widths)))

        def rule(left: str, mid: str, right: str) -> str:
            return " " * margin + left + mid.join("─" * w for w in widths) + right

        out.append(rule("┌", "┬", "┐"))
        for r in range(rows):
            out.append(row_names[r].rjust(margin - 1) + " │" + "│".join(at(r, c).center(w) for c, w in
                                                                         zip(range(cols), widths)) + "│")
            out.append(rule("├", "┼", "┤") if r + 1 < rows else rule("└", "┴", "┘"))
        return out

    # -- PNG -----------------------------------------------------------------------------------------------
    def png(self, path: str | Path, *, dpi: int = 100) -> Path:
        """Draw the picture into a PNG file (matplotlib); returns its path."""
        plt = load_pyplot()
        path = Path(path)
        facets = self.facets()[:MAX_FACETS]
        row_dim, col_dim = self._axes_of_grid()
        rows = self.counts[row_dim] if row_dim is not None else 1
        cols = self.counts[col_dim] if col_dim is not None else 1
        # each panel keeps the array's proportions (within 1:3), in block units
        height_elems = self.shape[row_dim] if row_dim is not None else max(1, self.shape[col_dim] // 8
                                                                           if col_dim is not None else 1)
        width_elems = self.shape[col_dim] if col_dim is not None else 1
        ratio = min(3.0, max(1 / 3, height_elems / width_elems))
        ncols = min(len(facets), 4)
        nrows = (len(facets) + ncols - 1) // ncols
        panel_w = min(6.0, 11.0 / ncols)
        panel_h = panel_w * ratio
        header = [self.title or f"{list(self.shape)} as {self.dist}", *self.notes, *self.describe(), self.legend()]
        header_h = 0.2 + 0.19 * len(header)
        width = ncols * (panel_w + 1.3) + 0.3
        height = header_h + nrows * (panel_h + 1.0)
        fig, axes = plt.subplots(nrows, ncols, figsize=(max(width, 6.5), height), squeeze=False)
        fig.text(0.01, 1 - 0.1 / height, "\n".join(header), ha="left", va="top", fontsize=9)
        groups = sorted({cell.contributions for cell in self.member_cells.values()})
        colors = plt.get_cmap("tab20")
        for ax in axes.flat[len(facets):]:
            ax.set_axis_off()
        for ax, (title, grid) in zip(axes.flat, facets):
            for key, cell in grid.items():
                r = key[0] if row_dim is not None else 0
                c = key[-1] if col_dim is not None else 0
                partial = len(cell.contributions) > 1
                shade = groups.index(cell.contributions)
                ax.add_patch(plt.Rectangle((c, r), 1, 1, facecolor=colors((2 * shade + shade // 10) % 20),
                                           edgecolor="black", linewidth=1.2, hatch="//" if partial else None,
                                           alpha=0.85))
                label = cell.label().replace(" + ", "\n+ ") if partial else cell.label()
                ax.text(c + 0.5, r + 0.5, label, ha="center", va="center", fontsize=10 if cols <= 8 else 7,
                        bbox={"boxstyle": "round", "facecolor": "white", "alpha": 0.85, "linewidth": 0})
            ax.set_xlim(0, cols)
            ax.set_ylim(rows, 0)
            ax.set_aspect(ratio * cols / rows)
            ax.set_xticks([c + 0.5 for c in range(cols)])
            ax.set_xticklabels([self._span(col_dim, c) for c in range(cols)] if col_dim is not None else [""],
                               fontsize=8)
            ax.set_yticks([r + 0.5 for r in range(rows)] if row_dim is not None else [])
            if row_dim is not None:
                ax.set_yticklabels([self._span(row_dim, r) for r in range(rows)], fontsize=8)
            ax.xaxis.tick_top()
            if col_dim is not None:
                ax.set_xlabel(f"dim {col_dim} ({self.shape[col_dim]}; "
                              f"{','.join(self.dist.dims[col_dim]) or 'whole'})", fontsize=9)
            if row_dim is not None:
                ax.set_ylabel(f"dim {row_dim} ({self.shape[row_dim]}; "
                              f"{','.join(self.dist.dims[row_dim]) or 'whole'})", fontsize=9)
            if title:
                ax.set_title(title, fontsize=9, pad=18)
        fig.tight_layout(rect=(0, 0, 1, 1 - header_h / height))
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=dpi)
        plt.close(fig)
        return path
