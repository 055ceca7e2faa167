"""Checkpoints and faults of sessions on MPI ranks.

A training step of the MLP (AdamW) saved under FSDP (ZeRO-3) on x=4 ranks loads under data parallel on x=2,
Megatron on y=2 and one simulated device: the state bit for bit as it was at the save, and the next steps equal
torch's. A rank killed (kill -9) or hung (stopped) mid-step ends the session within 10 s with an error naming
it, leaves no process of the job, and the checkpoint saved before stays intact. A session inside the user's
own mpiexec job saves and loads collectively (checkpoint_worker.py)."""

import os
import signal
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")

import slicer  # noqa: E402
from example_modules import load  # noqa: E402
from rank_faults import hang_env  # noqa: E402
from slicer import strategies as st  # noqa: E402
from slicer.core.errors import RunError  # noqa: E402
from slicer.runtime.jobs.mpiexec import run_spmd  # noqa: E402

train = load("torch/train_step.py", "train_step")
HERE = Path(__file__).parent
ADAMW = slicer.AdamW(0.01, betas=(0.9, 0.99), weight_decay=0.1)


@pytest.fixture(scope="module")
def mlp():
    """(model, loss_fn, batch, imported training step)."""
    model, loss_fn, batch = train.mlp()
    return model, loss_fn, batch, slicer.training_step(model, loss_fn, *batch, optimizer=ADAMW)


def compiled(step, kind):
    mesh, tactics = {
        "fsdp-4": ({"x": 4}, lambda: st.zero(step, "x", stage=3)),
        "data-2": ({"x": 2}, lambda: st.data_parallel(step, "x")),
        "megatron-2": ({"y": 2}, lambda: st.megatron(step, "y", column=["0.*"], row=["2.weight"])),
        "one-device": ({"x": 1}, lambda: []),
    }[kind]
    return slicer.compile(step, mesh=mesh, tactics=tactics())


@pytest.mark.slow
def test_saved_under_fsdp_on_4_loads_under_three_others_and_trains_on_as_torch(mlp, tmp_path):
    model, loss_fn, batch, step = mlp
    want_losses, want_params = train.torch_steps(model, loss_fn, batch, ADAMW, 4)
    with compiled(step, "fsdp-4").session(ranks=4, timeout=300) as s:
        losses = [float(s.step(*batch)) for _ in range(2)]
        s.save(tmp_path / "ck")
        at_save = s.state_dict()
    np.testing.assert_allclose(losses, want_losses[:2], rtol=1e-5)
    for kind, ranks in (("data-2", 2), ("megatron-2", 2), ("one-device", None)):
        with compiled(step, kind).session(ranks=ranks, timeout=300) as s:
            s.load(tmp_path / "ck")
            assert s.steps == 2
            state = s.state_dict()
            assert list(state) == list(at_save)
            for name, value in at_save.items():
                assert np.array_equal(state[name], value), (kind, name)
            losses = [float(s.step(*batch)) for _ in range(2)]
            final = s.state_dict()
        np.testing.assert_allclose(losses, want_losses[2:], rtol=1e-5, err_msg=kind)
        for name, want in want_params.items():
            assert train.relative_error(final[name], want) < 1e-5, (kind, name)
    state = slicer.load_checkpoint(tmp_path / "ck", tensors=True)
    model.load_state_dict({k: state[k] for k in model.state_dict()})  # a torch state_dict out
    assert torch.equal(model[0].weight.detach(), torch.from_numpy(at_save["0.weight"]))


def job_processes(job) -> set[int]:
    """mpiexec and every process under it (hydra's proxies, the ranks)."""
    parents = {}
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit():
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    found, frontier = {job.process.pid}, [job.process.pid]
    while frontier:
        pid = frontier.pop()
        children = [p for p, parent in parents.items() if parent == pid]
        found.update(children)
        frontier.extend(children)
    return found


def alive(pids) -> list[int]:
    live = []
    for pid in pids:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                live.append(pid)
        except OSError:
            continue
    return live


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


@pytest.mark.parametrize("fault", ["kill -9", "hang"])
def test_a_rank_killed_or_hung_mid_step_ends_the_session_naming_it(mlp, fault, tmp_path, monkeypatch):
    """Rank 1 stops itself at its third step (the test hook SIGSTOPs it before its part, rank 0 waits in a
    collective): "hang" leaves it so, "kill -9" then kills it."""
    model, loss_fn, batch, step = mlp
    for name, text in hang_env("1:step2").items():
        monkeypatch.setenv(name, text)
    s = compiled(step, "data-2").session(ranks=2, timeout=300)
    processes = job_processes(s.job)
    assert len(alive(processes)) >= 3  # mpiexec, a proxy, the ranks
    for _ in range(2):
        s.step(*batch)
    s.save(tmp_path / "ck")
    at_save = s.state_dict()
    files = {p.name: p.read_bytes() for p in (tmp_path / "ck").iterdir()}
    stopped_at = []

    def kill_when_stopped():
        pid = s.job.pids[1]
        while _state(pid) not in ("T", "t", "gone"):
            time.sleep(0.01)
        stopped_at.append(time.monotonic())
        if fault == "kill -9":
            os.kill(pid, signal.SIGKILL)

    watcher = threading.Thread(target=kill_when_stopped)
    watcher.start()
    # kill -9: rank 1, or both when mpiexec ended rank 0 before the session looked (a loaded machine)
    killed = r"(rank 1|ranks 0, 1) of the job of 2 ranks went away"
    message = killed if fault == "kill -9" else "rank 1 stopped answering"
    with pytest.raises(RunError, match=message):
        s.step(*batch)
    ended = time.monotonic()
    watcher.join()
    assert ended - stopped_at[0] < 10
    assert alive(processes) == []  # the job's processes are gone, none orphaned
    with pytest.raises(RunError, match="has ended"):
        s.step(*batch)
    s.close()
    assert {p.name: p.read_bytes() for p in (tmp_path / "ck").iterdir()} == files
    state = slicer.load_checkpoint(tmp_path / "ck")
    assert all(np.array_equal(state[n], v) for n, v in at_save.items())


def test_a_session_inside_an_mpiexec_job_saves_and_loads_collectively(tmp_path):
    done = run_spmd(2, [sys.executable, str(HERE / "checkpoint_worker.py"), str(HERE.parent / "unit" / "runtime"),
                        str(tmp_path / "ck")], timeout=240)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("checkpoint ok") == 2
    assert sorted(p.name for p in (tmp_path / "ck").iterdir()) == ["001.w.r0.npy", "001.w.r1.npy", "manifest.json"]
