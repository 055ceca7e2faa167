"""bf16 on real MPI ranks: a bf16 linalg program (matmul, elementwise, a sum) partitioned three ways runs on 2
ranks with its collectives over shared memory and over MPI, and on 4 ranks; a bf16 training step runs in a
session on 2 ranks. All reductions of bf16 add in f32 and round once: over shared memory in the simulator's
order (the simulator's bits), over MPI as f32 on the wire (2 ranks: the same bits, one f32 addition; 4 ranks:
MPI's order, within bf16's rounding). References: the in-process simulator, float64 and torch eager bf16."""

import copy
import sys
from pathlib import Path

import numpy as np
import pytest

import slicer
from slicer.core import compare

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "api"))
from test_element_types import BF16, PROGRAM, TACTICS


def bf16_inputs():
    rng = np.random.default_rng(5)
    return rng.standard_normal((8, 64)).astype(BF16), (rng.standard_normal((64, 32)) / 8).astype(BF16)


@pytest.mark.parametrize("collectives", ["shm", "mpi"])
def test_bf16_program_on_2_ranks_equals_the_simulator_bit_for_bit(monkeypatch, collectives):
    monkeypatch.setenv("SLICER_COLLECTIVES", collectives)
    x, w = bf16_inputs()
    for tactic in TACTICS.values():
        prog = slicer.compile(PROGRAM, mesh=slicer.Mesh(x=2), tactics=slicer.parse_tactics(tactic))
        simulated, ranked = prog.run(x, w), prog.run(x, w, ranks=2)
        for a, b in zip(simulated, ranked):
            assert b.dtype == BF16 and np.array_equal(a.view(np.uint16), b.view(np.uint16)), (collectives, tactic)


def test_bf16_contraction_split_over_4_ranks():
    x, w = bf16_inputs()
    prog = slicer.compile(PROGRAM, mesh=slicer.Mesh(x=4), tactics=slicer.parse_tactics(TACTICS["split-contraction"]))
    g, s = prog.run(x, w, ranks=4, oversubscribe=True)
    sim_g, sim_s = prog.run(x, w)
    assert compare.same_result(sim_g, g) and compare.same_result(sim_s, s)
    h = x.astype(np.float64) @ w.astype(np.float64)
    assert np.max(np.abs(g.astype(np.float64) - np.tanh(h) * h)) <= 2 ** -6 * np.abs(np.tanh(h) * h).max()


def test_bf16_training_step_session_on_2_ranks():
    torch = pytest.importorskip("torch")
    pytest.importorskip("torch_mlir")
    from example_modules import load
    train = load("torch/train_step.py", "train_step")
    model, loss_fn, batch = train.mlp()
    model = model.to(torch.bfloat16)
    batch = tuple(b.bfloat16() for b in batch)
    optimizer = slicer.AdamW(0.01, betas=(0.9, 0.99), weight_decay=0.1)
    step = slicer.training_step(model, loss_fn, *batch, optimizer=optimizer)
    prog = slicer.compile(step, mesh=slicer.Mesh(x=2), tactics=[slicer.Tile(arg="x", dim=0, axes="x")])
    results = {}
    for ranks in (None, 2):
        with prog.session(ranks=ranks, timeout=300) as session:
            results[ranks] = ([float(session.step(*batch)) for _ in range(3)], session.state_dict())
    assert results[None][0] == results[2][0]
    for name, value in results[None][1].items():
        assert value.dtype == results[2][1][name].dtype and compare.same_exactly(value, results[2][1][name]), name
    torch_model = copy.deepcopy(model)
    opt = train.torch_optimizer(optimizer, list(torch_model.parameters()))
    want = []  # torch eager in bf16
    for _ in range(3):
        opt.zero_grad()
        loss = loss_fn(torch_model, *batch)
        loss.backward()
        opt.step()
        want.append(loss.item())
    np.testing.assert_allclose(results[2][0], want, rtol=1e-2)


def test_slicer_run_takes_bf16_npy_files(tmp_path):
    """`slicer-run --inputs` reads bf16 .npy files (numpy writes them as raw 2-byte voids) and `--check` passes."""
    import subprocess
    x, w = bf16_inputs()
    (tmp_path / "p.mlir").write_text(PROGRAM)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "w.npy", w)
    done = subprocess.run([sys.executable, "-m", "slicer.tools.slicer_run", str(tmp_path / "p.mlir"), "--mesh", "x=2",
                           "--tactic", "arg0.1=x", "--tactic", "arg1.0=x", "-n", "2", "--inputs",
                           f"{tmp_path / 'x.npy'},{tmp_path / 'w.npy'}", "--check", "-o", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "results match the unpartitioned program" in done.stdout, done.stderr[-2000:]
    prog = slicer.compile(PROGRAM, mesh=slicer.Mesh(x=2), tactics=slicer.parse_tactics(TACTICS["split-contraction"]))
    saved = np.load(tmp_path / "out" / "result0.npy")
    assert np.array_equal(saved.view(np.uint16), prog.run(x, w)[0].view(np.uint16))
