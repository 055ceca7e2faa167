"""Block pictures (slicer.viz.block_picture): the text's content for arguments, intermediates (partial sums,
loop-body members) and results on 1-, 2- and 3-D meshes, value lookup and its errors, and PNG files."""

import builtins
import re

import numpy as np
import pytest
from viz_examples import compile_example

import slicer
from slicer.core.mesh import Mesh
from slicer.redistribution import DistType
from slicer.redistribution.layout import Layout
from slicer.redistribution.numpy_semantics import block_slices
from slicer.viz import BlockPicture, device_ranges

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def grid_rows(text: str) -> list[list[str]]:
    """The cells of every grid row of a text picture, stripped."""
    return [[c.strip() for c in line.split("│")[1:-1]] for line in text.splitlines() if line.count("│") >= 2]


def megatron():
    return compile_example("mlp", {"y": 4}, "arg1.1=y;arg3.0=y")


def mlp_2d():
    return compile_example("mlp", {"x": 2, "y": 2}, "arg0.0=x;arg1.1=y;arg3.0=y")


def test_a_weight_tiled_over_columns():
    text = megatron().picture("w1").text()
    assert text.splitlines()[0] == "argument #1 %w1 (%1): f32[16, 32] as [[],[y]] on mesh y=4"
    assert "dim 0 (16): whole; dim 1 (32): 4 blocks of 8 over y" in text
    assert "each device holds one 16x8 block (512 B); no two devices hold the same block" in text
    assert "device = its y coordinate" in text
    assert re.search(r"0:8\s+8:16\s+16:24\s+24:32", text)
    assert grid_rows(text) == [["0", "1", "2", "3"]]


def test_replicated_and_partial_sums_on_a_two_dimensional_mesh():
    prog = mlp_2d()
    w1 = prog.picture(1).text()
    assert "each block is on 2 devices (replicated over x)" in w1
    assert "device = x*2 + y (mesh x=2,y=2): 0=(0,0) 1=(0,1) 2=(1,0) 3=(1,1)" in w1
    assert grid_rows(w1) == [["0,2", "1,3"]]
    x = prog.picture("arg0").text()
    assert "columns: dim 1, rows: dim 0" in x and grid_rows(x) == [["0,1"], ["2,3"]]
    # the kernel's output before the all_reduce: the loop's result, partial over y
    partial = prog.picture("y").text()
    assert partial.splitlines()[0] == "value %4 (%y): f32[8, 16] as [[x],[]] partial=[y] on mesh x=2,y=2"
    assert "as the all_reduce that reads it sees it" in partial
    assert "partial sums over y" in partial and grid_rows(partial) == [["0 + 1"], ["2 + 3"]]
    result = prog.picture("result0").text()
    assert result.splitlines()[0].startswith("result #0 (%5): f32[8, 16] as [[x],[]]")
    assert grid_rows(result) == [["0,1"], ["2,3"]]


def test_three_dimensional_arrays_on_a_three_dimensional_mesh_get_facets():
    prog = compile_example("batch_matmul", {"x": 2, "y": 2, "z": 2}, "arg0.0=x;arg0.1=y;arg1.2=z")
    result = prog.picture("result0").text()
    assert "dim 2 = 0:4:" in result and "dim 2 = 4:8:" in result  # one facet per block of the third dim
    assert grid_rows(result) == [["0", "2"], ["4", "6"], ["1", "3"], ["5", "7"]]
    attention = compile_example("mha", {"x": 2, "y": 2}, "arg0.0=x;arg1.1=y;arg2.1=y;arg3.1=y;arg4.0=y")
    member = attention.picture("q").text()  # the queries: computed in a loop body, read by no collective
    assert "computed in a loop body over x,y" in member
    assert [line.strip() for line in member.splitlines() if line.strip().startswith("member")] == [
        "member x=0,y=0:", "member x=0,y=1:", "member x=1,y=0:", "member x=1,y=1:"]
    assert grid_rows(member) == [["0"], ["1"], ["2"], ["3"]]


def test_every_cell_is_the_block_its_devices_hold():
    """The cells agree with the redistribution package's geometry (block_slices) for random types."""
    rng = np.random.default_rng(3)
    mesh = Mesh(a=2, b=3, c=2)
    for _ in range(30):
        axes = list(mesh.axis_names)
        rng.shuffle(axes)
        dims, partial = [[], [], []], []
        for axis in axes:
            where = int(rng.integers(0, 5))
            if where < 3:
                dims[where].append(axis)
            elif where == 3:
                partial.append(axis)
        shape = [mesh.group_size(d) * 2 for d in dims]
        dist = DistType.of(mesh, shape, dims, partial)
        picture = BlockPicture(mesh, dist)
        layout = Layout.get(mesh, dist.shape)
        for index, cell in picture.cells.items():
            devices = [r for group in cell.contributions for r in group]
            starts = {tuple(s.start for s in block_slices(layout, dist, r)) for r in devices}
            assert len(starts) == 1
            assert tuple(s // b for s, b in zip(next(iter(starts)), dist.local_shape(mesh))) == index
        assert sorted(r for c in picture.cells.values() for g in c.contributions for r in g) == list(range(12))
        assert all(len(c.contributions) == mesh.group_size(dist.partial) for c in picture.cells.values())
        picture.text()  # draws without error


def test_sub_axes_are_drawn_like_axes():
    """A type over parts of an axis (what plans with sub-axes pass through): y:(1)2 is the major half of y,
    idx(y) // 2; the part it leaves out (y:(2)2) replicates; partial sums over a part add two devices."""
    mesh = Mesh(x=2, y=4)
    picture = BlockPicture(mesh, DistType.of(mesh, (8, 8), [("y:(1)2",), ("x",)], ()))
    text = picture.text()
    assert "dim 0 (8): 2 blocks of 4 over y:(1)2; dim 1 (8): 2 blocks of 4 over x" in text
    assert "each block is on 2 devices (replicated over y:(2)2)" in text
    assert grid_rows(text) == [["0,1", "4,5"], ["2,3", "6,7"]]
    partial = BlockPicture(mesh, DistType.of(mesh, (8,), [("x", "y:(1)2")], ("y:(2)2",))).text()
    assert "partial sums over y:(2)2" in partial
    assert grid_rows(partial) == [["0 + 1", "2 + 3", "4 + 5", "6 + 7"]]


def test_scalars_and_chosen_grid_dims():
    mesh = Mesh(x=2)
    assert grid_rows(BlockPicture(mesh, DistType.of(mesh, (), [])).text()) == [["0,1"]]
    dist = DistType.of(mesh, (4, 6, 8), [[], ["x"], []])
    text = BlockPicture(mesh, dist, grid_dims=(1, 2)).text()
    assert "columns: dim 2, rows: dim 1" in text and grid_rows(text) == [["0"], ["1"]]


def test_device_ranges():
    assert device_ranges([3, 0, 1, 2, 5, 7, 8]) == "0-3,5,7,8"
    assert device_ranges([4]) == "4"


@pytest.mark.parametrize("what,expected", [
    (0, "%0"), ("arg2", "%2"), ("argument #3", "%3"), ("result0", "%5"), ("%4", "%4"), ("w1", "%1"),
    ("%w2", "%3"), ("y", "%4")])
def test_values_are_found_by_index_graph_name_or_source_name(what, expected):
    from slicer.viz import resolve, source_names

    prog = mlp_2d()
    assert resolve(prog.graph, what, source_names(prog.graph, prog.original)) == expected


@pytest.mark.parametrize("what,message", [
    (7, "@mlp has 4 arguments: arg index 7 is out of range (0..3)"),
    ("result1", "@mlp has 1 result: result index 1 is out of range (0..0)"),
    ("h", "%h is defined in the source but computed inside a kernel"),
    ("nothing", "no value 'nothing' in the kernel graph of @mlp"),
    (1.5, "which value?"),
])
def test_unknown_values_are_clear_errors(what, message):
    with pytest.raises(slicer.VizError, match=re.escape(message)) as info:
        mlp_2d().picture(what)
    if what in ("h", "nothing"):
        assert "its values are: argument #0 %x (%0), argument #1 %w1 (%1)" in str(info.value)


def test_show_prints_the_text(capsys):
    megatron().show("w1")
    assert "argument #1 %w1 (%1)" in capsys.readouterr().out


def _png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE and data[12:16] == b"IHDR"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


@pytest.mark.slow
def test_png_pictures(tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib.image

    prog = compile_example("batch_matmul", {"x": 2, "y": 2, "z": 2}, "arg0.0=x;arg0.1=y;arg1.2=z")
    attention = compile_example("mha", {"x": 2, "y": 2}, "arg0.0=x;arg1.1=y;arg2.1=y;arg3.1=y;arg4.0=y")
    for program, what in ((prog, "arg0"), (attention, "q"), (prog, "result0")):
        path = program.picture(what).png(tmp_path / f"{what}.png")
        width, height = _png_size(path)
        assert 300 < width < 2000 and 200 < height < 2000
        image = matplotlib.image.imread(path)
        assert image.shape[:2] == (height, width) and image.std() > 0.05  # not a blank image
    mlp_2d().show("y", png=tmp_path / "sub" / "partial.png")
    assert _png_size(tmp_path / "sub" / "partial.png")


def test_png_without_matplotlib_says_how_to_install_it(tmp_path, monkeypatch):
    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.split(".")[0] == "matplotlib":
            raise ImportError("no matplotlib")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    with pytest.raises(slicer.VizError, match=r"pip install 'slicer\[viz\]'"):
        megatron().picture("w1").png(tmp_path / "w1.png")
    assert not (tmp_path / "w1.png").exists()
