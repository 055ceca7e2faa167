"""XLA running a reshard on N CPU devices of one process: the reference for Slicer's MPI executor.

Shared by `benchmarks/collectives.py` and `benchmarks/redistribution_vs_xla.py`. JAX is optional (the
`bench` extra: `pip install -e '.[bench]'`); without it `unavailable()` says why and callers skip XLA.

    python benchmarks/xla_reshard.py --devices 8 --cases cases.json --reps 15    # JSON lines to stdout

A case is a dict: {"name", "mesh": "x=2,y=4", "shape": [1024, 1024], "src": "[[x],[y]]", "dst": "[[y],[x]]",
"dtype": "f32"}, types in Slicer's text form (per dim the mesh axes major to minor, which is also JAX's
`PartitionSpec` order). Two ways XLA reshards, each timed after warm-up (median of `reps`,
`block_until_ready`):
- "device_put": what a user writes, `jax.device_put(x, NamedSharding(mesh, dst))` on an array placed with the
  source sharding. The array is placed afresh before every repetition (untimed): JAX caches an array's host
  copy, and a second `device_put` of the same array to a replicated sharding copies from that cache instead
  of resharding (56 us instead of 2-5 ms for 4 MiB on 8 devices, measured);
- "jit": XLA's own SPMD plan, `jax.jit(lambda a: a, out_shardings=dst)` (collectives in one executable).
Each result says whether the devices' shards share buffers ("aliased"): `device_put` to a replicated sharding
of a small array gives every CPU device the same buffer (measured: one buffer for 8 devices at 4 MiB, eight at
64 MiB), which moves nothing an MPI rank could share; callers should not compare with aliased results.

A source with partial sums has no `NamedSharding`: its contributions are stacked on a leading dim tiled by
the partial axes and a jitted `shard_map` reduces them the way XLA's partitioner would: `psum_scatter` when
the target tiles one dim by exactly the partial axes on top of the source's tiling, `psum` when the target is
the source without partial axes, otherwise `psum` followed by a reshard (`with_sharding_constraint`) to the
target, all in one jitted computation.

The device count must be fixed before JAX is imported: `configure(n)` sets
`XLA_FLAGS=--xla_force_host_platform_device_count=n` (call it first, or run this file as a script).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import statistics
import sys
import time

import numpy as np

_FLAG = "--xla_force_host_platform_device_count"


def configure(devices: int) -> None:
    """Make JAX see `devices` CPU devices (must run before `import jax`)."""
    if "jax" in sys.modules:
        import jax
        if len(jax.devices()) != devices:
            raise RuntimeError(f"JAX is already imported with {len(jax.devices())} devices; configure({devices}) "
                               "must run before the first `import jax` (or use a fresh process)")
        return
    flags = re.sub(rf"{_FLAG}=\d+", "", os.environ.get("XLA_FLAGS", "")).strip()
    os.environ["XLA_FLAGS"] = f"{flags} {_FLAG}={devices}".strip()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")


def unavailable() -> str | None:
    """None when JAX can be imported, else why not (to print when skipping XLA)."""
    # Found, not imported: importing JAX here would fix its device count before `configure` runs.
    if importlib.util.find_spec("jax") is None or importlib.util.find_spec("jaxlib") is None:
        return "JAX is not installed; install the bench extra: pip install -e '.[bench]'"
    return None


def parse_mesh(text: str) -> list[tuple[str, int]]:
    return [(name.strip(), int(size)) for name, size in (part.split("=") for part in text.split(","))]


def parse_type(text: str) -> tuple[list[tuple[str, ...]], tuple[str, ...]]:
    """`[[x,y],[]] partial=[z]` -> ([("x", "y"), ()], ("z",))."""
    dims_text, _, partial_text = text.partition("partial=")
    inner = dims_text.strip()[1:-1]
    dims = [tuple(a.strip().strip("'\"") for a in group.split(",") if a.strip())
            for group in re.findall(r"\[([^\[\]]*)\]", inner)]
    partial = tuple(a.strip() for a in partial_text.strip()[1:-1].split(",") if a.strip()) if partial_text else ()
    return dims, partial


def partition_spec(dims):
    from jax.sharding import PartitionSpec
    return PartitionSpec(*[None if not d else d[0] if len(d) == 1 else tuple(d) for d in dims])


class Reshard:
    """One case set up on the JAX devices: `run()` performs the reshard once and waits for it."""

    def __init__(self, case: dict, method: str = "jit"):
        import jax
        import jax.numpy as jnp
        from jax.sharding import Mesh, NamedSharding

        axes = parse_mesh(case["mesh"])
        count = int(np.prod([n for _, n in axes]))
        if len(jax.devices()) < count:
            raise RuntimeError(f"{case['name']}: the mesh {case['mesh']} needs {count} devices, JAX has "
                               f"{len(jax.devices())}: configure({count}) before importing jax")
        self.mesh = Mesh(np.array(jax.devices()[:count]).reshape([n for _, n in axes]), [a for a, _ in axes])
        src, partial = parse_type(case["src"])
        dst, dst_partial = parse_type(case["dst"])
        if dst_partial:
            raise ValueError(f"{case['name']}: XLA has no partial-sum target sharding")
        shape = tuple(case["shape"])
        dtype = {"f32": jnp.float32, "f64": jnp.float64, "f16": jnp.float16, "i32": jnp.int32}[case.get("dtype", "f32")]
        data = (np.arange(int(np.prod(shape))) % 251).astype(dtype).reshape(shape)
        self.target = NamedSharding(self.mesh, partition_spec(dst))
        self.refresh = None
        if partial:
            if method != "jit":
                raise ValueError(f"{case['name']}: a partial-sum source has no sharding to device_put from")
            self.x, self.fn = self._partial(data, src, partial, dst)
        else:
            source = NamedSharding(self.mesh, partition_spec(src))
            self.x = jax.device_put(data, source)
            if method == "jit":
                self.fn = jax.jit(lambda a: a, out_shardings=self.target)
            elif method == "device_put":
                self.fn = lambda x: jax.device_put(x, self.target)
                self.refresh = lambda: jax.device_put(data, source).block_until_ready()
            else:
                raise ValueError(f"method {method!r}: use 'jit' or 'device_put'")
        self.nbytes = data.nbytes

    def _partial(self, data, src, partial, dst):
        import jax
        from jax.sharding import NamedSharding, PartitionSpec

        groups = int(np.prod([self.mesh.shape[a] for a in partial]))
        stacked = np.broadcast_to(data, (groups,) + data.shape) / np.asarray(groups, data.dtype)
        x = jax.device_put(stacked.astype(data.dtype),
                           NamedSharding(self.mesh, PartitionSpec(tuple(partial), *partition_spec(src))))
        scatter = [d for d in range(len(src)) if tuple(dst[d]) == tuple(src[d]) + tuple(partial)
                   and all(tuple(dst[e]) == tuple(src[e]) for e in range(len(src)) if e != d)]
        if scatter:
            d = scatter[0]
            body = lambda b: jax.lax.psum_scatter(b[0], partial, scatter_dimension=d, tiled=True)  # noqa: E731
            out_spec = partition_spec(dst)
        else:
            body = lambda b: jax.lax.psum(b[0], partial)  # noqa: E731
            out_spec = partition_spec(src)
        reduce = jax.shard_map(body, mesh=self.mesh, in_specs=PartitionSpec(tuple(partial), *partition_spec(src)),
                               out_specs=out_spec)
        if scatter or [tuple(d) for d in dst] == [tuple(d) for d in src]:
            return x, jax.jit(reduce)
        return x, jax.jit(lambda b: jax.lax.with_sharding_constraint(reduce(b), self.target))

    def prepare(self) -> None:
        """Untimed: a fresh source array when the method needs one."""
        if self.refresh is not None:
            self.x = self.refresh()

    def run(self):
        return self.fn(self.x).block_until_ready()


def time_case(case: dict, reps: int = 15, warmup: int = 3, method: str = "jit", inner: int = 1) -> dict:
    """Median seconds of `reps` reshards after `warmup` ones, with every sample; each sample is the time of
    `inner` back-to-back reshards divided by `inner` (each from a freshly placed source with "device_put")."""
    reshard = Reshard(case, method)
    samples = []
    for rep in range(warmup + reps):
        elapsed = 0.0
        for _ in range(inner):
            reshard.prepare()
            start = time.perf_counter()
            out = reshard.run()
            elapsed += time.perf_counter() - start
        if rep >= warmup:
            samples.append(elapsed / inner)
        buffers = len({s.data.unsafe_buffer_pointer() for s in out.addressable_shards})
        devices = len(out.addressable_shards)
        del out
    return {"name": case["name"], "method": method, "median_s": statistics.median(samples), "samples_s": samples,
            "aliased": buffers < devices}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", type=int, required=True)
    ap.add_argument("--cases", required=True, help="JSON file with a list of cases")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--inner", type=int, default=1, help="reshards per sample (the sample is their mean)")
    ap.add_argument("--methods", default="jit,device_put", help="comma-separated: jit, device_put")
    args = ap.parse_args(argv)
    configure(args.devices)
    reason = unavailable()
    if reason:
        print(json.dumps({"skipped": reason}))
        return
    with open(args.cases) as f:
        cases = json.load(f)
    for case in cases:
        for method in args.methods.split(","):
            try:
                print(json.dumps(time_case(case, args.reps, args.warmup, method, args.inner)), flush=True)
            except ValueError as exc:
                print(json.dumps({"name": case["name"], "method": method, "skipped": str(exc)}), flush=True)


if __name__ == "__main__":
    main()
