"""End to end: Slicer on 1 and 2 ranks next to numpy (1 and 2 threads) and JAX jit (1 and 2 devices).

    python benchmarks/end_to_end.py                          # table to stdout (~3 min)
    python benchmarks/end_to_end.py --json e2e.json --reps 15
    python benchmarks/end_to_end.py --programs mha --reps 5

Programs (f32, the examples scaled to the sizes of issue 14, generated here):
- `mlp_relu`, `mlp_gelu`: examples/mlp.mlir, relu(x @ w1 + b1) @ w2 (or tanh-gelu), B=512, D=1024,
  H=4096; Megatron tactics (w1's columns and w2's rows over y: one all_reduce of the result);
- `mha`: examples/mha.mlir, S=1024, D=1024, 16 heads of 64; heads over y (the output projection's
  partial sums all_reduced).

Each contender is a persistent process (or MPI job) that warms up once, then runs the program once per
command; the driver runs the contenders in interleaved rounds (rotating order), `--reps` rounds,
median per contender. On this shared 2-core machine a busy spell then hits every contender alike,
instead of whichever happened to be measured at that moment.
- Slicer: `slicer.compile(text, mesh=Mesh(y=R), tactics)` then `mpiexec -n R` of this script's worker,
  which runs the kernel graph with the runtime's `RankExecutor` (each rank reads its blocks once); a
  run's time is the slowest rank's (an MPI max), measured between barriers; idle ranks wait on a
  named pipe, not in MPI (MPICH spins). The first run's results are checked against numpy;
- numpy: the same computation in numpy (OPENBLAS_NUM_THREADS=1 or 2);
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

sys.path.insert(0, str(Path(__file__).parent))
from snippets import tanh_gelu

SIZES = {"B": 512, "D": 1024, "H": 4096, "S": 1024, "heads": 16, "E": 64}
# `--small` (the suite's smoke test): the same programs at toy sizes, for the workers too (they inherit it).
SMALL_ENV = "SLICER_E2E_SMALL"
if os.environ.get(SMALL_ENV) == "1":
    SIZES = {"B": 16, "D": 32, "H": 64, "S": 32, "heads": 4, "E": 8}
PROGRAMS = ("mlp_relu", "mlp_gelu", "mha")


# ---------------------------------------------------------------------------------------------------
# The programs
# ---------------------------------------------------------------------------------------------------


def mlp_text(B: int, D: int, H: int, activation: str) -> str:
    """examples/mlp.mlir at B x D x H with relu or tanh-gelu."""
    if activation == "relu":
        act = "    %r = arith.maximumf %v, %zero : f32\n"
    else:
        act = tanh_gelu("v", "r")
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
                    ("tensor<4x4x16xf32>", f"tensor<{H}x{E}x{D}xf32>"),
                    ("tensor<4x8x4xf32>", f"tensor<{H}x{S}x{E}xf32>"),
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
    return [(rng.standard_normal(shape,
                                 dtype=np.float32) / np.sqrt(shape[0] if len(shape) > 1 else 1)).astype(np.float32)
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
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

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
# Workers: one persistent process (or MPI job) per contender, one timed run per "run" command
# ---------------------------------------------------------------------------------------------------


def serve(run, check=None) -> None:
    """Worker loop: warm up, say `ready`, then one timed run per `run` line on stdin (JSON line out)."""
    run()
    report = {"ready": True}
    if check is not None:
        report.update(check())
    print(json.dumps(report), flush=True)
    for line in sys.stdin:
        if line.strip() != "run":
            break
        start, start_cpu = time.perf_counter(), time.thread_time()
        run()
        print(json.dumps({"time": time.perf_counter() - start, "cpu": time.thread_time() - start_cpu}), flush=True)


def numpy_worker(name: str) -> None:
    arrays = inputs(program_shapes(name))
    fn = numpy_fn(name)
    serve(lambda: fn(*arrays))


def jax_worker(name: str, devices: int) -> None:
    import jax

    fn, shardings = jax_fn(name, devices)
    host = inputs(program_shapes(name))
    arrays = [jax.device_put(a, sh) for a,
              sh in zip(host, shardings)] if shardings else [jax.device_put(a) for a in host]

    def check():
        reference = numpy_fn(name)(*host)
        return {"relative_error": float(np.abs(np.asarray(fn(*arrays)) - reference).max() / np.abs(reference).max())}

    serve(lambda: fn(*arrays).block_until_ready(), check)


def program_shapes(name: str) -> list:
    return program(name)[2]


def slicer_worker(job: str) -> None:
    """Under mpiexec: the kernel graph on this rank's blocks, one run per line on this rank's FIFO.

    Waiting for the next command is a blocking read of a named pipe, not an MPI call: MPICH spins in
    collectives, and an idle job must not take CPU from the contender being timed. A run's time is the
    slowest rank's (MPI max), between barriers; rank 0 prints it.
    """
    from mpi4py import MPI

    # The runtime's executor (one import site: the lead may move it).
    from slicer.lowering.kernel_graph import KernelGraph
    from slicer.runtime.execution.blocks import read_block
    from slicer.runtime.execution.executor import RankExecutor
    from slicer.runtime.simulation.simulator import assemble

    job_dir = Path(job)
    graph = KernelGraph.from_json((job_dir / "graph.json").read_text())
    comm = MPI.COMM_WORLD
    executor = RankExecutor(graph, comm)
    rank = executor.rank
    blocks = [read_block(job_dir / f"input{i}.npy", graph.values[n].dist, graph.mesh, rank, graph.values[n].numpy_dtype)
              for i, n in enumerate(graph.args)]
    results, _ = executor.run(blocks)  # warm-up: page faults, lazy binding, MPI connections
    gathered = comm.gather(results, root=0)
    if rank == 0:
        result = assemble(graph.mesh, graph.result_dists[0], [g[0] for g in gathered], "result #0")
        np.save(job_dir / "result.npy", result)
        print(json.dumps({"ready": True, "backend": executor.backend}), flush=True)
    with open(job_dir / f"go{rank}") as commands:
        for line in commands:
            if line.strip() != "run":
                break
            comm.Barrier()
            start, start_cpu = time.perf_counter(), time.thread_time()
            _, timings = executor.run(blocks)
            elapsed = comm.allreduce(time.perf_counter() - start, op=MPI.MAX)
            cpu = comm.allreduce(time.thread_time() - start_cpu, op=MPI.MAX)
            # each action of the run (kernel, collective start, collective wait) on the slowest rank
            steps = [(f"{e.kind} {e.label}", comm.allreduce(e.end - e.start, op=MPI.MAX)) for e in timings]
            if rank == 0:
                print(json.dumps({"time": elapsed, "cpu": cpu, "steps": steps}), flush=True)


# ---------------------------------------------------------------------------------------------------
# The driver
# ---------------------------------------------------------------------------------------------------


# Set on some machines for old OpenBLAS builds (the env notes): they make a current numpy run a slower kernel, so
# every contender runs without them (JAX and Slicer do not read them), as `env -u ... python` would.
OPENBLAS_VARIABLES = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def contender_environment(extra: dict | None) -> dict:
    """This process's environment without `OPENBLAS_VARIABLES`, plus `extra`, unbuffered."""
    base = {k: v for k, v in os.environ.items() if k not in OPENBLAS_VARIABLES}
    return dict(base, **(extra or {}), PYTHONUNBUFFERED="1")


class Contender:
    """A running worker: `run()` times one run of it."""

    def __init__(self, label: str, command: list[str], env: dict | None = None, fifos: list[Path] = ()):
        self.label = label
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        text=True, env=contender_environment(env),
                                        start_new_session=True)
        # FIFOs opened read-write: never blocks, and the ranks' reads see a writer at once.
        self.fifos = [os.fdopen(os.open(f, os.O_RDWR), "w") for f in fifos]
        self.ready = self._line()
        self.runs: list[dict] = []

    def _line(self) -> dict:
        line = self.process.stdout.readline()
        if not line:
            self.process.kill()
            raise RuntimeError(f"{self.label} failed:\n{self.process.stderr.read()[-3000:]}")
        return json.loads(line)

    def run(self) -> dict:
        for pipe in self.fifos or [self.process.stdin]:
            pipe.write("run\n")
            pipe.flush()
        result = self._line()
        self.runs.append(result)
        return result

    def close(self) -> None:
        for pipe in self.fifos + [self.process.stdin]:
            try:
                pipe.write("quit\n")
                pipe.close()
            except (BrokenPipeError, OSError):
                pass
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, 9)


def slicer_contender(name: str, ranks: int, arrays: list[np.ndarray], job: Path) -> Contender:
    import slicer
    from slicer.runtime.execution.executor import load_kernels
    from slicer.runtime.jobs.mpiexec import find_mpiexec

    text, tactics, _ = program(name)
    start = time.perf_counter()
    prog = slicer.compile(text, mesh=slicer.Mesh(y=ranks), tactics=tactics)
    load_kernels(prog.graph)  # compile (or hit the cache) once, before the ranks start
    compile_seconds = time.perf_counter() - start
    job.mkdir()
    (job / "graph.json").write_text(prog.graph.to_json())
    for i, a in enumerate(arrays):
        np.save(job / f"input{i}.npy", a)
    fifos = []
    for rank in range(ranks):
        os.mkfifo(job / f"go{rank}")
        fifos.append(job / f"go{rank}")
    contender = Contender(f"slicer {ranks} rank(s)", [find_mpiexec(), "-n", str(ranks), sys.executable, __file__,
                                                     "--slicer-worker", str(job)], fifos=fifos)
    contender.compile_seconds = compile_seconds
    return contender


def compile_times(name: str = "mha", ranks: int = 2) -> dict:
    """Partition + kernel compile of `name`, cold (empty cache) and cached, each in a fresh process."""
    script = (
        "import sys, time\nstart = time.perf_counter()\nimport slicer\n"
        "from slicer.runtime.execution.executor import load_kernels\n"
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
    parser.add_argument("--programs", default=",".join(PROGRAMS),
                        help=f"comma-separated subset of {','.join(PROGRAMS)}")
    parser.add_argument("--no-jax", action="store_true", help="skip JAX even if installed")
    parser.add_argument("--small", action="store_true", help="toy sizes: checks that the benchmark runs (smoke test)")
    parser.add_argument("--slicer-worker", metavar="JOB_DIR", help=argparse.SUPPRESS)
    parser.add_argument("--numpy-worker", metavar="PROGRAM", help=argparse.SUPPRESS)
    parser.add_argument("--jax-worker", nargs=2, metavar=("PROGRAM", "DEVICES"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.small and os.environ.get(SMALL_ENV) != "1":  # the sizes are read at import: start again with them
        os.execve(sys.executable, [sys.executable, __file__, *sys.argv[1:]], dict(os.environ, **{SMALL_ENV: "1"}))
    if args.slicer_worker:
        from slicer.runtime.jobs.rank import run_rank

        run_rank(lambda comm: slicer_worker(args.slicer_worker))
        return
    if args.numpy_worker:
        numpy_worker(args.numpy_worker)
        return
    if args.jax_worker:
        name, devices = args.jax_worker
        jax_worker(name, int(devices))
        return

    have_jax = not args.no_jax
    if have_jax and importlib.util.find_spec("jax") is None:
        print("jax is not installed: skipping the JAX columns (pip install -e '.[bench]')", flush=True)
        have_jax = False
    results = {"machine": f"{platform.machine()} {os.cpu_count()} cores", "reps": args.reps, "sizes": SIZES,
               "programs": {}, "load_average_before": os.getloadavg()}
    for name in args.programs.split(","):
        arrays = inputs(program_shapes(name))
        reference = numpy_fn(name)(*arrays)
        with tempfile.TemporaryDirectory(prefix="slicer-e2e-") as tmp:
            contenders: dict[str, Contender] = {}
            try:
                for threads in (1, 2):
                    env = {v: str(threads) for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
                    contenders[f"numpy_{threads}t"] = Contender(f"numpy {threads} thread(s)", [
                        sys.executable, __file__, "--numpy-worker", name], env=env)
                if have_jax:
                    for devices in (1, 2):
                        contenders[f"jax_{devices}d"] = Contender(f"jax {devices} device(s)", [
                            sys.executable, __file__, "--jax-worker", name, str(devices)],
                            env={"XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}"})
                for ranks in (1, 2):
                    contenders[f"slicer_{ranks}r"] = slicer_contender(name, ranks, arrays, Path(tmp) / f"job{ranks}")
                # Interleaved rounds, the order rotating: a busy spell on this shared machine hits everyone.
                keys = list(contenders)
                for rep in range(args.reps):
                    for key in keys[rep % len(keys):] + keys[:rep % len(keys)]:
                        contenders[key].run()
            finally:
                for contender in contenders.values():
                    contender.close()
            entry: dict = {}
            for key, contender in contenders.items():
                entry[key] = {"times": [r["time"] for r in contender.runs],
                              "cpu_times": [r["cpu"] for r in contender.runs]}
                if "relative_error" in contender.ready:
                    entry[key]["relative_error"] = contender.ready["relative_error"]
                if key.startswith("slicer"):
                    result = np.load(Path(tmp) / f"job{key[7]}" / "result.npy")
                    error = float(np.abs(result - reference).max() / np.abs(reference).max())
                    if error > 1e-3:
                        raise RuntimeError(f"slicer's {name} ({key}) differs from numpy: relative error {error:.2e}")
                    median = int(np.argsort(entry[key]["times"])[len(contender.runs) // 2])
                    entry[key].update(relative_error=error, steps=contender.runs[median]["steps"],
                                      compile_seconds=contender.compile_seconds, backend=contender.ready["backend"])
                single = key in ("numpy_1t", "slicer_1r", "slicer_2r")  # else the work runs on other threads
                cpu = f" (CPU of the {'slowest rank' if key.startswith('slicer') else 'thread'} " \
                      f"{np.median(entry[key]['cpu_times']) * 1e3:.1f} ms)" if single else ""
                print(f"{name}: {contender.label} {np.median(entry[key]['times']) * 1e3:.1f} ms{cpu}", flush=True)
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
    load = (results["load_average_before"][0] + results.get("load_average_after",
                                                            results["load_average_before"])[0]) / 2
    lines = []
    for title, statistic in (("median", np.median), ("best", np.min)):
        lines += [f"f32, {title} of {results['reps']} interleaved runs, ms (wall clock; machine load "
                  f"average {load:.1f} "
                  f"on {os.cpu_count()} cores)",
                  "| program | " + " | ".join(titles[c] for c in columns) + " | 2 ranks vs best other | 2 "
                                                                            "ranks vs 1 rank |",
                  "|---" * (len(columns) + 3) + "|"]
        for name, entry in results["programs"].items():
            value = {c: float(statistic(entry[c]["times"])) * 1e3 for c in columns if c in entry}
            others = [value[c] for c in ("numpy_1t", "numpy_2t", "jax_1d", "jax_2d") if c in value]
            cells = [f"{value[c]:.1f}" if c in value else "-" for c in columns]
            lines.append(f"| {name} | " + " | ".join(cells) + f" | {min(others) / value['slicer_2r']:.2f}x | "
                         f"{value['slicer_1r'] / value['slicer_2r']:.2f}x |")
        lines.append("")
    cpu = ["CPU time of the slowest rank (median): " + "; ".join(
        f"{name} {np.median(e['slicer_1r']['cpu_times']) * 1e3:.1f} ms on 1 rank, "
        f"{np.median(e['slicer_2r']['cpu_times']) * 1e3:.1f} ms on 2"
        for name, e in results["programs"].items()) + "."]
    lines += cpu
    c = results.get("compile")
    if c:
        lines += ["", f"Partition + compile of the attention block on {c['ranks']} ranks, fresh processes: cold "
                  f"{c['cold']['total']:.2f} s (partition {c['cold']['partition']:.2f}, kernels "
                  f"{c['cold']['kernels']:.2f}), "
                  f"from the cache {c['cached']['total'] * 1e3:.0f} ms (partition "
                  f"{c['cached']['partition'] * 1e3:.0f} ms, "
                  f"kernels {c['cached']['kernels'] * 1e3:.0f} ms); imports {c['cached']['imports']:.2f} s "
                  "not included."]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
