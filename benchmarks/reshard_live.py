"""Live resharding (`session.reshard`, issue 52) against `save` + `load` of the same state, on 2 MPI ranks, same run.

A training session of the GPT of examples/training (SGD with momentum: parameters and momentum buffers) takes a
step under data parallel on x=2, then goes round data -> ZeRO-3 (FSDP) -> Megatron on y=2 -> data, `--rounds`
times (a step after each switch). The first round's switches load each program on the ranks; from the second on
the ranks have kept them loaded (`runtime/state/loaded_programs.py`), as a user switching between training and
serving does. Each switch is timed twice on the same state: `s.reshard(program)` (the plans run on the ranks,
the new program's kernels loaded from the cache or kept: the request that makes the new session; also the moves
alone, the slowest rank's time running the plans, `move_seconds`), and `save(dir)` of the old session plus
`load(dir)` into an open session of the new program (on a second job of 2 ranks, its kernels loaded before the
timer starts). The state after both is compared bit for bit. Per switch: both wall times (driver, seconds),
their ratio, the bytes each device receives against the synthesizer's lower bound, the state's bytes, and the
most a rank's resident peak (VmHWM) grew while the moves ran against the predicted peak of state bytes.
With `--preload`, each program is loaded ahead (`s.preload(program)`, timed on its own before the switch), so
the first round's switches find it kept too: the switch a user who preloads pays.

    python benchmarks/reshard_live.py                      # D=128, 2 layers, twice round
    python benchmarks/reshard_live.py --d-model 256 --json reshard.json
    python benchmarks/reshard_live.py --preload             # every switch's program loaded ahead

Timings on the shared 2-core machine are noisy: compare the ratio of one run, not figures across runs.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

import slicer
from slicer import strategies as st

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples" / "training"))
import model as gpt_model  # noqa: E402

SGD = slicer.SGD(0.1, momentum=0.9, weight_decay=0.01)
CHAIN = ("zero3", "megatron", "data")


def programs(d_model: int, layers: int):
    torch.manual_seed(0)
    model = gpt_model.GPT(vocab=64, seq=16, d_model=d_model, n_head=2, n_layer=layers)
    batch = gpt_model.batch(torch.Generator().manual_seed(0), 4, 16, 64)
    step = slicer.training_step(model, gpt_model.loss_fn, *batch, optimizer=SGD)
    return batch, {
        "data": slicer.compile(step, mesh=slicer.Mesh(x=2), tactics=st.data_parallel(step, "x")),
        "zero3": slicer.compile(step, mesh=slicer.Mesh(x=2), tactics=st.zero(step, "x", stage=3)),
        "megatron": slicer.compile(step, mesh=slicer.Mesh(y=2), tactics=st.megatron(step, "y", **gpt_model.MEGATRON)),
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2, help="times round the chain of switches")
    parser.add_argument("--preload", action="store_true", help="load each program ahead (session.preload)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    batch, progs = programs(args.d_model, args.layers)
    rows, previous = [], "data"
    s = progs["data"].session(ranks=2, timeout=600)
    s.step(*batch)
    with tempfile.TemporaryDirectory() as scratch:
        for k, (round_, name) in enumerate((r, n) for r in range(1, args.rounds + 1) for n in CHAIN):
            with progs[name].session(ranks=2, timeout=600) as other:  # a second job, its program loaded
                start = time.perf_counter()
                s.save(Path(scratch) / f"ck{k}")
                other.load(Path(scratch) / f"ck{k}")
                save_load = time.perf_counter() - start
                loaded = other.state_dict()
            start = time.perf_counter()
            preloaded = s.preload(progs[name]) if args.preload else False
            preload_s = time.perf_counter() - start
            start = time.perf_counter()
            s = s.reshard(progs[name])
            live = time.perf_counter() - start
            moved = s.state_dict()
            same = list(moved) == list(loaded) and all(np.array_equal(moved[n], v) for n, v in loaded.items())
            r = s.resharded
            rows.append({"round": round_, "switch": f"{previous} -> {name}", "reshard_s": live,
                         "moves_s": s.move_seconds, "kept_program": s.kept_program, "preloaded": preloaded,
                         "preload_s": preload_s, "move_peak_bytes": s.move_peak_bytes,
                         "predicted_peak_bytes_per_device": r.peak_bytes_per_device,
                         "old_state_bytes_per_device": sum(m.plan.src_bytes for m in r.moves),
                         "save_load_s": save_load, "moves_speedup": save_load / max(s.move_seconds, 1e-9),
                         "speedup": save_load / live, "recv_bytes_per_device": r.bytes_received_per_device,
                         "lower_bound_bytes_per_device": r.lower_bound_bytes_per_device,
                         "at_lower_bound": all(m.plan.reaches_lower_bound for m in r.moves),
                         "state_bytes": sum(v.nbytes for v in moved.values()), "bit_identical": same})
            moves = max(s.move_seconds, 1e-9)
            print(f"round {round_} {previous:>8} -> {name:<8} reshard {live:7.3f} s (moves {moves:7.4f} s)  save+load "
                  f"{save_load:7.3f} s  {save_load / live:5.1f}x ({save_load / moves:6.1f}x moves)  "
                  f"recv/dev {r.bytes_received_per_device} B (bound "
                  f"{r.lower_bound_bytes_per_device} B)  VmHWM +{s.move_peak_bytes} B (predicted "
                  f"+{r.peak_bytes_per_device - sum(m.plan.src_bytes for m in r.moves)} B)  kept {s.kept_program}"
                  f"{f'  (preloaded in {preload_s:.3f} s)' if preloaded else ''}  bit-identical {same}", flush=True)
            previous = name
            s.step(*batch)
    print("\n".join(s.resharded.explain().splitlines()[:4]), "...")
    s.close()
    if args.json:
        args.json.write_text(json.dumps({"d_model": args.d_model, "layers": args.layers, "rows": rows}, indent=1))
    if not all(row["bit_identical"] for row in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
