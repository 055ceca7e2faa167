"""Checkpoints of simulated sessions: saved under one mesh and layout, loaded under others bit for bit, written
atomically (manifest last, checksums), and refused whole when a file or the manifest does not fit."""

import json

import numpy as np
import pytest
from session_programs import STEP, data, expected

import slicer
from slicer.core.errors import CheckpointError
from slicer.runtime.state.checkpoint import MANIFEST


def program(mesh, *tactics, text=STEP):
    return slicer.compile(text, mesh=slicer.Mesh(**mesh), tactics=list(tactics))


@pytest.fixture(scope="module")
def saved_under():
    """w's rows split over x=4 (the result w laid out alike, as a session needs)."""
    return program({"x": 4}, slicer.Tile(arg="w", dim=0, axes="x"), slicer.Tile(result="w", dim=0, axes="x"))


@pytest.fixture(scope="module")
def others():
    return {
        "replicated on x=2": program({"x": 2}, slicer.Tile(arg="x", dim=0, axes="x")),
        "columns on y=2": program({"y": 2}, slicer.Tile(arg="w", dim=1, axes="y"),
                                  slicer.Tile(result="w", dim=1, axes="y")),
        "one device": program({"x": 1}),
    }


def checkpoint(prog, directory, steps=2):
    x, w0 = data()
    with prog.session(state={1: w0}) as s:  # by position: the other program names it v
        for _ in range(steps):
            s.step(x)
        s.save(directory)
        return s.state_dict()


@pytest.mark.slow
def test_saved_under_one_layout_loaded_under_three_others_bit_for_bit(saved_under, others, tmp_path):
    at_save = checkpoint(saved_under, tmp_path / "ck")
    x, w0 = data()
    outs, w_final = expected(x, w0, 4)
    for name, prog in others.items():
        with prog.session(state={"w": np.zeros_like(w0)}) as s:
            s.load(tmp_path / "ck")
            assert s.steps == 2, name
            assert np.array_equal(s.state_dict()["w"], at_save["w"]), name
            for want in outs[2:]:
                np.testing.assert_allclose(s.step(x), want, rtol=1e-5)
            assert np.array_equal(s.state_dict()["w"], w_final), name


def test_each_distinct_block_is_written_once_and_nothing_temporary_stays(saved_under, others, tmp_path):
    checkpoint(saved_under, tmp_path / "split")
    manifest = json.loads((tmp_path / "split" / MANIFEST).read_text())
    (w,) = manifest["values"]
    assert (w["name"], w["dtype"], w["shape"], w["dist"], manifest["step"], manifest["mesh"]) == \
        ("w", "<f4", [4, 4], "[[x],[]]", 2, "x=4")
    assert [(b["rank"], b["start"], b["stop"]) for b in w["blocks"]] == [(r, [r, 0], [r + 1, 4]) for r in range(4)]
    checkpoint(others["replicated on x=2"], tmp_path / "replicated")
    (w,) = json.loads((tmp_path / "replicated" / MANIFEST).read_text())["values"]
    assert [b["rank"] for b in w["blocks"]] == [0]  # the replicated w once, by rank 0
    for directory in (tmp_path / "split", tmp_path / "replicated"):
        assert sorted(p.name for p in directory.iterdir()) == sorted([MANIFEST] + [b["file"] for b in w["blocks"]]
                                                                     if directory.name == "replicated" else
                                                                     [MANIFEST] + [f"001.w.r{r}.npy" for r in range(4)])


def test_a_torch_style_state_dict_out(saved_under, tmp_path):
    at_save = checkpoint(saved_under, tmp_path / "ck")
    state = slicer.load_checkpoint(tmp_path / "ck")
    assert list(state) == ["w"] and np.array_equal(state["w"], at_save["w"])
    torch = pytest.importorskip("torch")
    tensors = slicer.load_checkpoint(tmp_path / "ck", tensors=True)
    assert isinstance(tensors["w"], torch.Tensor) and np.array_equal(tensors["w"].numpy(), at_save["w"])


def _corrupt_truncate(directory):
    path = directory / "001.w.r2.npy"
    path.write_bytes(path.read_bytes()[:-5])
    return r"001\.w\.r2\.npy' has \d+ bytes, the manifest says \d+ \(truncated"


def _corrupt_flip(directory):
    path = directory / "001.w.r1.npy"
    data_ = bytearray(path.read_bytes())
    data_[-3] ^= 0x10
    path.write_bytes(bytes(data_))
    return r"001\.w\.r1\.npy' does not match its sha256"


def _corrupt_no_manifest(directory):
    (directory / MANIFEST).unlink()
    return "has no manifest.json: it is not a checkpoint"


def _corrupt_missing_block(directory):
    (directory / "001.w.r3.npy").unlink()
    return r"001\.w\.r3\.npy' is missing"


def _corrupt_shape(directory):
    manifest = json.loads((directory / MANIFEST).read_text())
    manifest["values"][0]["dtype"] = "<f8"
    (directory / MANIFEST).write_text(json.dumps(manifest))
    return r"state 'w': saved as float64\[4, 4\], this program takes float32\[4, 4\]"


def _corrupt_garbage_manifest(directory):
    (directory / MANIFEST).write_text("{not json")
    return "not a readable checkpoint manifest"


def _corrupt_outside(directory):
    manifest = json.loads((directory / MANIFEST).read_text())
    manifest["values"][0]["blocks"][0]["file"] = "../elsewhere.npy"
    (directory / MANIFEST).write_text(json.dumps(manifest))
    return r"block file '../elsewhere.npy' of state 'w' is not a file name in the checkpoint's directory"


@pytest.mark.parametrize("corrupt", [_corrupt_truncate, _corrupt_flip, _corrupt_no_manifest, _corrupt_missing_block,
                                     _corrupt_shape, _corrupt_garbage_manifest, _corrupt_outside])
def test_a_damaged_checkpoint_is_refused_and_nothing_is_loaded(saved_under, corrupt, tmp_path):
    checkpoint(saved_under, tmp_path / "ck")
    match = corrupt(tmp_path / "ck")
    x, w0 = data()
    with saved_under.session(state={"w": w0}) as s:
        with pytest.raises(CheckpointError, match=match):
            s.load(tmp_path / "ck")
        assert np.array_equal(s.state_dict()["w"], w0) and s.steps == 0
    with pytest.raises(CheckpointError):
        slicer.load_checkpoint(tmp_path / "ck")


def test_a_checkpoint_of_another_program_is_refused(saved_under, tmp_path):
    other = program({"x": 2}, text=STEP.replace('"w"', '"v"'))
    checkpoint(other, tmp_path / "ck")
    with saved_under.session(state={"w": data()[1]}) as s:
        with pytest.raises(CheckpointError, match=r"of another program: it lacks state \['w'\] and has state this "
                                                  r"program does not take \['v'\]"):
            s.load(tmp_path / "ck")


def test_a_save_that_fails_half_way_leaves_no_checkpoint(saved_under, tmp_path):
    """Saving over an older checkpoint removes its manifest first: a save that stops leaves no mix of two."""
    checkpoint(saved_under, tmp_path / "ck")
    (tmp_path / "ck" / "001.w.r2.npy").unlink()
    (tmp_path / "ck" / "001.w.r2.npy").mkdir()  # the block file cannot be renamed into place
    with pytest.raises(CheckpointError, match=r"cannot write .*001\.w\.r2\.npy"):
        checkpoint(saved_under, tmp_path / "ck")
    assert not (tmp_path / "ck" / MANIFEST).exists()
    assert not [p for p in (tmp_path / "ck").iterdir() if p.name.endswith(".tmp")]
    with pytest.raises(CheckpointError, match="not a checkpoint"):
        slicer.load_checkpoint(tmp_path / "ck")
