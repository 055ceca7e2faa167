"""End to end: Slicer on 1 and 2 ranks next to numpy (1 and 2 threads) and JAX jit (1 and 2 devices).

    python benchmarks/end_to_end.py                          # table to stdout (~3 min)
    python benchmarks/end_to_end.py --json e2e.json --reps 15
    python benchmarks/end_to_end.py --programs mha --reps 5

Programs (f32, the examples scaled to the sizes of issue 14, generated here):
- `mlp_relu`, `mlp_gelu`: examples/mlp.mlir, relu(x @ w1 + b1) @ w2 (or tanh-gelu), B=512, D=1024,
  H=4096; Megatron tactics (w1's columns and w2's rows over y: one all_reduce of the result);
- `mha`: examples/mha.mlir, S=1024, D=1024, 16 heads of 64; heads over y (the output projection's
  partial sums all_reduced).

Each contender runs in its own process, `--reps` timed runs after a warm-up, median reported:
- Slicer: `slicer.compile(text, mesh=Mesh(y=R), tactics)` then `mpiexec -n R` of this script's worker,
  which runs the kernel graph with the runtime's `RankExecutor` (each rank reads its blocks once); a
  run's time is the slowest rank's (an MPI max), measured between barriers. The first run's results
  are checked against numpy;
- numpy: the same computation written with matmul/einsum-free numpy (OPENBLAS_NUM_THREADS=1 or 2);
- JAX: `jax.jit` on one CPU device, and on two (`XLA_FLAGS=--xla_force_host_platform_device_count=2`)
  with the same shardings as the tactics. Skipped with a message when jax is not installed
  (`pip install -e '.[bench]'`).
Also the compile time of the attention block: partition + kernel compile, cold (empty kernel
cache) and from the cache, each in a fresh process.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

SIZES = {"B": 512, "D": 1024, "H": 4096, "S": 1024, "heads": 16, "E": 64}
PROGRAMS = ("mlp_relu", "mlp_gelu", "mha")


# ---------------------------------------------------------------------------------------------------
# The programs
# ---------------------------------------------------------------------------------------------------


def mlp_text(B: int, D: int, H: int, activation: str) -> str:
    """examples/mlp.mlir at B x D x H with relu or tanh-gelu."""
    if activation == "relu":
        act = "    %r = arith.maximumf %v, %zero : f32\n"
    else:
        act = """    %c0 = arith.constant 0.044715 : f32
    %c1 = arith.constant 0.7978845608 : f32
    %half = arith.constant 0.5 : f32
    %one = arith.constant 1.0 : f32
    %v2 = arith.mulf %v, %v : f32
    %v3 = arith.mulf %v2, %v : f32
    %t0 = arith.mulf %v3, %c0 : f32
    %t1 = arith.addf %v, %t0 : f32
    %t2 = arith.mulf %t1, %c1 : f32
    %th = math.tanh %t2 : f32
    %t3 = arith.addf %th, %one : f32
    %t4 = arith.mulf %t3, %half : f32
    %r = arith.mulf %t4, %v : f32
"""
    return f"""
func.func @mlp(%x: tensor<{B}x{D}xf32>, %w1: tensor<{D}x{H}xf32>, %b1: tensor<{H}xf32>,
               %w2: tensor<{H}x{D}xf32>) -> tensor<{B}x{D}xf32> {{
  %zero = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<{B}x{H}xf32>
  %f1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<{B}x{H}xf32>) -> tensor<{B}x{H}xf32>
  %h = linalg.matmul ins(%x, %w1 : tensor<{B}x{D}xf32>, tensor<{D}x{H}xf32>)
                     outs(%f1 : tensor<{B}x{H}xf32>) -> tensor<{B}x{H}xf32>
  %hb = linalg.generic {{indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (j)>,
                                         affine_map<(i, j) -> (i, j)>],
                        iterator_types = ["parallel", "parallel"]}}
      ins(%h, %b1 : tensor<{B}x{H}xf32>, tensor<{H}xf32>) outs(%e1 : tensor<{B}x{H}xf32>) {{
  ^bb0(%hv: f32, %bv: f32, %o: f32):
    %s = arith.addf %hv, %bv : f32
    linalg.yield %s : f32
  }} -> tensor<{B}x{H}xf32>
  %a = linalg.generic {{indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>],
                       iterator_types = ["parallel", "parallel"]}}
      ins(%hb : tensor<{B}x{H}xf32>) outs(%e1 : tensor<{B}x{H}xf32>) {{
  ^bb0(%v: f32, %o: f32):
{act}    linalg.yield %r : f32
  }} -> tensor<{B}x{H}xf32>
  %e2 = tensor.empty() : tensor<{B}x{D}xf32>
  %f2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<{B}x{D}xf32>) -> tensor<{B}x{D}xf32>
  %y = linalg.matmul ins(%a, %w2 : tensor<{B}x{H}xf32>, tensor<{H}x{D}xf32>)
                     outs(%f2 : tensor<{B}x{D}xf32>) -> tensor<{B}x{D}xf32>
  return %y : tensor<{B}x{D}xf32>
}}
"""


def mha_text(S: int, D: int, H: int, E: int) -> str:
    """examples/mha.mlir at S tokens, D model dims, H heads of E (scale 1/sqrt(E))."""
    text = (Path(__file__).resolve().parents[1] / "examples" / "mha.mlir").read_text()
    body = text[text.index("#x_d"):]
    replacements = [("tensor<8x16xf32>", f"tensor<{S}x{D}xf32>"), ("tensor<16x4x4xf32>", f"tensor<{D}x{H}x{E}xf32>"),
                    ("tensor<4x4x16xf32>", f"tensor<{H}x{E}x{D}xf32>"), ("tensor<4x8x4xf32>", f"tensor<{H}x{S}x{E}xf32>"),
                    ("tensor<4x8x8xf32>", f"tensor<{H}x{S}x{S}xf32>"), ("tensor<4x8xf32>", f"tensor<{H}x{S}xf32>"),
                    ("arith.constant 0.5 : f32", f"arith.constant {float(1 / np.sqrt(E))!r} : f32")]
    for old, new in replacements:
        assert old in body, old
        body = body.replace(old, new)
    return body


def program(name: str) -> tuple[str, list, list]:
    """(MLIR text, tactics, numpy input shapes) of a benchmark program."""
    import slicer

    s = SIZES
    if name.startswith("mlp"):
        text = mlp_text(s["B"], s["D"], s["H"], "relu" if name == "mlp_relu" else "gelu")
        tactics = [slicer.Tile(arg=1, dim=1, axes="y"), slicer.Tile(arg=3, dim=0, axes="y")]
        shapes = [(s["B"], s["D"]), (s["D"], s["H"]), (s["H"],), (s["H"], s["D"])]
    else:
        text = mha_text(s["S"], s["D"], s["heads"], s["E"])
        tactics = [slicer.Tile(arg=i, dim=1, axes="y") for i in (1, 2, 3)] + [slicer.Tile(arg=4, dim=0, axes="y")]
        shapes = [(s["S"], s["D"])] + [(s["D"], s["heads"], s["E"])] * 3 + [(s["heads"], s["E"], s["D"])]
    return text, tactics, shapes


def inputs(shapes: list, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    # Scaled like trained weights: keeps softmax/gelu inputs in their interesting range.
    return [(rng.standard_normal(shape, dtype=np.float32) / np.sqrt(shape[0] if len(shape) > 1 else 1)).astype(np.float32)
            for shape in shapes]


# ---------------------------------------------------------------------------------------------------
# numpy and JAX references
# ---------------------------------------------------------------------------------------------------


def numpy_fn(name: str):
    s = SIZES

    def gelu(h):
        return 0.5 * h * (1 + np.tanh(0.7978845608 * (h + 0.044715 * h * h * h)))

    def mlp(x, w1, b1, w2):
        h = x @ w1
        h += b1
        h = np.maximum(h, 0, out=h) if name == "mlp_relu" else gelu(h)
        return h @ w2

    def mha(x, wq, wk, wv, wo):
        S, D, H, E = s["S"], s["D"], s["heads"], s["E"]
        q, k, v = ((x @ w.reshape(D, H * E)).reshape(S, H, E).transpose(1, 0, 2) for w in (wq, wk, wv))
        scores = q @ k.transpose(0, 2, 1)
        scores *= 1 / np.sqrt(E)
        scores -= scores.max(-1, keepdims=True)
        np.exp(scores, out=scores)
        scores /= scores.sum(-1, keepdims=True)
        ctx = scores @ v
        return ctx.transpose(1, 0, 2).reshape(S, H * E) @ wo.reshape(H * E, D)

    return mlp if name.startswith("mlp") else mha


def jax_fn(name: str, devices: int):
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    s = SIZES

    def mlp(x, w1, b1, w2):
        h = x @ w1 + b1
        h = jax.nn.relu(h) if name == "mlp_relu" else jax.nn.gelu(h, approximate=True)
        return h @ w2

    def mha(x, wq, wk, wv, wo):
        q, k, v = (jnp.einsum("sd,dhe->hse", x, w) for w in (wq, wk, wv))
        scores = jnp.einsum("hse,hte->hst", q, k) / np.sqrt(s["E"])
        p = jax.nn.softmax(scores, axis=-1)
        ctx = jnp.einsum("hst,hte->hse", p, v)
        return jnp.einsum("hse,hed->sd", ctx, wo)

    fn = mlp if name.startswith("mlp") else mha
    if devices == 1:
        return jax.jit(fn), None
    mesh = Mesh(np.array(jax.devices()[:devices]), ("y",))
    if name.startswith("mlp"):
        specs = [P(), P(None, "y"), P("y"), P("y", None)]
    else:
        specs = [P(), P(None, "y", None), P(None, "y", None), P(None, "y", None), P("y", None, None)]
    shardings = [NamedSharding(mesh, spec) for spec in specs]
    return jax.jit(fn, in_shardings=shardings, out_shardings=NamedSharding(mesh, P())), shardings


# ---------------------------------------------------------------------------------------------------
# Workers (each in its own process)
# ---------------------------------------------------------------------------------------------------


def median_runs(fn, reps: int) -> list[float]:
    fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def numpy_worker(name: str, reps: int, out: str) -> None:
    arrays = inputs(program_shapes(name))
    fn = numpy_fn(name)
    Path(out).write_text(json.dumps({"times": median_runs(lambda: fn(*arrays), reps)}))


def jax_worker(name: str, devices: int, reps: int, out: str) -> None:
    import jax

    fn, shardings = jax_fn(name, devices)
    arrays = inputs(program_shapes(name))
    if shardings:
        arrays = [jax.device_put(a, sh) for a, sh in zip(arrays, shardings)]
    else:
        arrays = [jax.device_put(a) for a in arrays]
    times = median_runs(lambda: fn(*arrays).block_until_ready(), reps)
    reference = numpy_fn(name)(*inputs(program_shapes(name)))
    error = float(np.abs(np.asarray(fn(*arrays)) - reference).max() / np.abs(reference).max())
    Path(out).write_text(json.dumps({"times": times, "relative_error": error}))


def program_shapes(name: str) -> list:
    return program(name)[2]


def slicer_worker(job: str) -> None:
    """Under mpiexec: run the kernel graph `reps` times on this rank's blocks (runtime internals)."""
    from mpi4py import MPI

    # The runtime's executor (one import site: the lead may move it).
    from slicer.lowering.kernel_graph import KernelGraph
    from slicer.runtime.blocks import read_block
    from slicer.runtime.executor import RankExecutor
    from slicer.spmd.simulator import assemble

    job_dir = Path(job)
    spec = json.loads((job_dir / "job.json").read_text())
    graph = KernelGraph.from_json((job_dir / "graph.json").read_text())
    comm = MPI.COMM_WORLD
    executor = RankExecutor(graph, comm)
    rank = executor.rank
    blocks = [read_block(job_dir / f"input{i}.npy", graph.values[n].dist, graph.mesh, rank, graph.values[n].numpy_dtype)
              for i, n in enumerate(graph.args)]
    results, _ = executor.run(blocks)  # warm-up: page faults, lazy binding, MPI connections
    gathered = comm.gather(results, root=0)
    times, cpu, steps = [], [], []
    for _ in range(spec["reps"]):
        comm.Barrier()
        start, start_cpu = time.perf_counter(), time.thread_time()
        _, timings = executor.run(blocks)
        elapsed = comm.allreduce(time.perf_counter() - start, op=MPI.MAX)
        cpu.append(comm.allreduce(time.thread_time() - start_cpu, op=MPI.MAX))
        per_step = [(label, comm.allreduce(t, op=MPI.MAX)) for label, t in timings]
        times.append(elapsed)
        steps.append(per_step)
    if rank == 0:
        result = assemble(graph.mesh, graph.result_dists[0], [g[0] for g in gathered], "result #0")
        np.save(job_dir / "result.npy", result)
        median = int(np.argsort(times)[len(times) // 2])
        (job_dir / "times.json").write_text(json.dumps({"times": times, "cpu_times": cpu, "steps": steps[median],
                                                        "backend": executor.backend}))


# ---------------------------------------------------------------------------------------------------
# The driver
# ---------------------------------------------------------------------------------------------------


def run_worker(args: list[str], env: dict | None = None, timeout: float = 1800) -> None:
    done = subprocess.run([sys.executable, __file__, *args], env=dict(os.environ, **(env or {})),
                          capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"worker {' '.join(args)} failed:\n{done.stderr[-3000:]}")


def run_slicer(name: str, ranks: int, reps: int, arrays: list[np.ndarray], reference: np.ndarray) -> dict:
    import slicer
    from slicer.runtime.executor import load_kernels
    from slicer.runtime.mpiexec import run_spmd

    text, tactics, _ = program(name)
    start = time.perf_counter()
    prog = slicer.compile(text, mesh=slicer.Mesh(y=ranks), tactics=tactics)
    load_kernels(prog.graph)  # compile (or hit the cache) once, before the ranks start
    compile_seconds = time.perf_counter() - start
    with tempfile.TemporaryDirectory(prefix="slicer-e2e-") as tmp:
        job = Path(tmp)
        (job / "graph.json").write_text(prog.graph.to_json())
        (job / "job.json").write_text(json.dumps({"reps": reps}))
        for i, a in enumerate(arrays):
            np.save(job / f"input{i}.npy", a)
        done = run_spmd(ranks, [sys.executable, __file__, "--slicer-worker", str(job)], timeout=1800)
        if done.returncode != 0:
            raise RuntimeError(f"slicer on {ranks} ranks failed:\n{done.stderr[-3000:]}")
        result = np.load(job / "result.npy")
        measured = json.loads((job / "times.json").read_text())
    error = float(np.abs(result - reference).max() / np.abs(reference).max())
    if error > 1e-3:
        raise RuntimeError(f"slicer's {name} on {ranks} ranks differs from numpy: relative error {error:.2e}")
    collectives = sum(t for label, t in measured["steps"] if not label.startswith("kernel"))
    return {"times": measured["times"], "cpu_times": measured["cpu_times"], "relative_error": error, "steps": measured["steps"],
            "collective_seconds": collectives, "compile_seconds": compile_seconds, "backend": measured["backend"]}


def compile_times(name: str = "mha", ranks: int = 2) -> dict:
    """Partition + kernel compile of `name`, cold (empty cache) and cached, each in a fresh process."""
    script = (
        "import sys, time\nstart = time.perf_counter()\nimport slicer\n"
        "from slicer.runtime.executor import load_kernels\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\nfrom end_to_end import program\n"
        "imported = time.perf_counter()\n"
        f"text, tactics, _ = program({name!r})\n"
        f"prog = slicer.compile(text, mesh=slicer.Mesh(y={ranks}), tactics=tactics)\n"
        "partitioned = time.perf_counter()\nkernels, backend = load_kernels(prog.graph)\nend = time.perf_counter()\n"
        "print(partitioned - imported, end - partitioned, imported - start)\n"
    )
    with tempfile.TemporaryDirectory(prefix="slicer-e2e-cache-") as cache:
        env = dict(os.environ, SLICER_CACHE_DIR=cache)
        runs = []
        for _ in range(2):
            done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
            partition, kernels, imports = map(float, done.stdout.split())
            runs.append({"partition": partition, "kernels": kernels, "total": partition + kernels, "imports": imports})
    return {"program": name, "ranks": ranks, "cold": runs[0], "cached": runs[1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=10, help="timed runs per contender (median reported)")
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON to PATH")
    parser.add_argument("--programs", default=",".join(PROGRAMS), help=f"comma-separated subset of {','.join(PROGRAMS)}")
    parser.add_argument("--no-jax", action="store_true", help="skip JAX even if installed")
    parser.add_argument("--slicer-worker", metavar="JOB_DIR", help=argparse.SUPPRESS)
    parser.add_argument("--numpy-worker", nargs=3, metavar=("PROGRAM", "REPS", "OUT"), help=argparse.SUPPRESS)
    parser.add_argument("--jax-worker", nargs=4, metavar=("PROGRAM", "DEVICES", "REPS", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.slicer_worker:
        from slicer.runtime.rank import run_rank

        run_rank(lambda comm: slicer_worker(args.slicer_worker))
        return
    if args.numpy_worker:
        name, reps, out = args.numpy_worker
        numpy_worker(name, int(reps), out)
        return
    if args.jax_worker:
        name, devices, reps, out = args.jax_worker
        jax_worker(name, int(devices), int(reps), out)
        return

    have_jax = not args.no_jax
    if have_jax and importlib.util.find_spec("jax") is None:
        print("jax is not installed: skipping the JAX columns (pip install -e '.[bench]')", flush=True)
        have_jax = False
    results = {"machine": f"{platform.machine()} {os.cpu_count()} cores", "reps": args.reps, "sizes": SIZES, "programs": {},
               "load_average_before": os.getloadavg()}
    for name in args.programs.split(","):
        shapes = program_shapes(name)
        arrays = inputs(shapes)
        reference = numpy_fn(name)(*arrays)
        entry: dict = {}
        with tempfile.TemporaryDirectory() as tmp:
            for threads in (1, 2):
                out = f"{tmp}/numpy{threads}.json"
                run_worker(["--numpy-worker", name, str(args.reps), out],
                           env={v: str(threads) for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")})
                entry[f"numpy_{threads}t"] = json.loads(Path(out).read_text())
                print(f"{name}: numpy {threads} thread(s) {np.median(entry[f'numpy_{threads}t']['times']) * 1e3:.1f} ms", flush=True)
            if have_jax:
                for devices in (1, 2):
                    out = f"{tmp}/jax{devices}.json"
                    run_worker(["--jax-worker", name, str(devices), str(args.reps), out],
                               env={"XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}"})
                    entry[f"jax_{devices}d"] = json.loads(Path(out).read_text())
                    print(f"{name}: jax {devices} device(s) {np.median(entry[f'jax_{devices}d']['times']) * 1e3:.1f} ms", flush=True)
        for ranks in (1, 2):
            entry[f"slicer_{ranks}r"] = run_slicer(name, ranks, args.reps, arrays, reference)
            r = entry[f"slicer_{ranks}r"]
            print(f"{name}: slicer {ranks} rank(s) {np.median(r['times']) * 1e3:.1f} ms (CPU of the slowest rank "
                  f"{np.median(r['cpu_times']) * 1e3:.1f} ms; steps {[(l[:12], round(t * 1e3, 1)) for l, t in r['steps']]})", flush=True)
        results["programs"][name] = entry
    results["compile"] = compile_times()
    results["load_average_after"] = os.getloadavg()
    print(f"compile (mha, 2 ranks): {json.dumps(results['compile'])}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    print()
    print(markdown(results))


def markdown(results: dict) -> str:
    columns = ["slicer_2r", "slicer_1r", "numpy_1t", "numpy_2t", "jax_1d", "jax_2d"]
    titles = {"slicer_2r": "Slicer 2 ranks", "slicer_1r": "Slicer 1 rank", "numpy_1t": "numpy 1 thread",
              "numpy_2t": "numpy 2 threads", "jax_1d": "JAX 1 device", "jax_2d": "JAX 2 devices"}
    load = (results["load_average_before"][0] + results.get("load_average_after", results["load_average_before"])[0]) / 2
    lines = [f"f32, median of {results['reps']} runs, ms (wall clock; machine load average {load:.1f} on {os.cpu_count()} cores)",
             "| program | " + " | ".join(titles[c] for c in columns) + " | 2 ranks vs best other | 2 ranks vs 1 rank |",
             "|---" * (len(columns) + 3) + "|"]
    for name, entry in results["programs"].items():
        med = {c: float(np.median(entry[c]["times"])) * 1e3 for c in columns if c in entry}
        others = [med[c] for c in ("numpy_1t", "numpy_2t", "jax_1d", "jax_2d") if c in med]
        cells = [f"{med[c]:.1f}" if c in med else "-" for c in columns]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {min(others) / med['slicer_2r']:.2f}x | "
                     f"{med['slicer_1r'] / med['slicer_2r']:.2f}x |")
    c = results.get("compile")
    if c:
        lines += ["", f"Partition + compile of the attention block on {c['ranks']} ranks, fresh processes: cold "
                  f"{c['cold']['total']:.2f} s (partition {c['cold']['partition']:.2f}, kernels {c['cold']['kernels']:.2f}), "
                  f"from the cache {c['cached']['total'] * 1e3:.0f} ms (partition {c['cached']['partition'] * 1e3:.0f} ms, "
                  f"kernels {c['cached']['kernels'] * 1e3:.0f} ms); imports {c['cached']['imports']:.2f} s not included."]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
