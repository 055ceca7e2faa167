"""Which units compute a contraction of bf16 operands: AMX tiles, AVX512-BF16 dot products, or f32 FMAs.

`amx` (`tdpbf16ps`: a 16x16 f32 tile += a 16x32 bf16 tile times a VNNI-packed 16x32 bf16 tile, 16K
multiply-adds per instruction), `avx512bf16` (`vdpbf16ps`: 16 f32 lanes each += a pair of bf16 products)
and `f32` (the bf16 pairs widened to f32 by a shift, then FMAs: any CPU with vector FMAs) all read the same
packed panels (`bf16_gemm.py`) and accumulate in f32. The choice is the target's best (`auto`), read from the
module's `slicer.target_bf16_units` attribute (set by `aot.compile_library` from its `Target`) or this host's
CPU flags (/proc/cpuinfo, read by `slicer.core.host.cpu_flags`); the `bf16-units` option of
`slicer-kernel-contract` forces one, so each path runs on a machine that has them all. Forcing units the target
lacks is an `OptionError`: the code would die of SIGILL.
"""

from __future__ import annotations

from slicer.core.errors import OptionError
from slicer.core.host import cpu_flags
from slicer.core.names import TARGET_BF16_UNITS_ATTR

from ..emitter import module_avx512

AMX, AVX512BF16, F32 = "amx", "avx512bf16", "f32"
BF16_UNITS = (AMX, AVX512BF16, F32)
"""From fastest to the one every CPU has."""
AUTO = "auto"

_AMX_CPUS = {"sapphirerapids", "emeraldrapids", "graniterapids", "graniterapids-d", "diamondrapids"}
_AVX512BF16_CPUS = {"cooperlake", "znver4", "znver5"} | _AMX_CPUS


def units_of_flags(flags: set[str]) -> str:
    """The best bf16 units of a CPU with these /proc/cpuinfo flags."""
    if {"amx_bf16", "amx_tile"} <= flags:
        return AMX
    if "avx512_bf16" in flags:
        return AVX512BF16
    return F32


def host_units() -> str:
    """The best bf16 units of this host's CPU."""
    return units_of_flags(set(cpu_flags()))


def units_of_target(cpu: str, features: str, avx512: bool) -> str:
    """The best bf16 units of an llc target (`-mcpu`, `-mattr`): the host's for `native`."""
    attrs = {f[1:]: f[0] == "+" for f in features.split(",") if f[:1] in "+-" and len(f) > 1}
    if not avx512:
        return F32
    amx = attrs.get("amx-bf16", cpu in _AMX_CPUS) and attrs.get("amx-tile", cpu in _AMX_CPUS)
    bf16 = attrs.get("avx512bf16", cpu in _AVX512BF16_CPUS)
    if cpu == "native":
        best = host_units()
        amx = attrs.get("amx-bf16", best == AMX) and attrs.get("amx-tile", best == AMX)
        bf16 = attrs.get("avx512bf16", best in (AMX, AVX512BF16))
    return AMX if amx else AVX512BF16 if bf16 else F32


def module_units(module) -> str:
    """The best bf16 units of the module's target (its attribute), or of this host when it has none."""
    attributes = module.operation.attributes
    if TARGET_BF16_UNITS_ATTR in attributes:
        return str(attributes[TARGET_BF16_UNITS_ATTR]).strip('"')
    return host_units() if module_avx512(module) else F32


def chosen_units(requested: str, available: str) -> str:
    """`requested` (or the best `available` for `auto`); units faster than the target has are an OptionError."""
    if requested == AUTO:
        return available
    if BF16_UNITS.index(requested) < BF16_UNITS.index(available):
        raise OptionError(f"slicer-kernel-contract: bf16-units={requested} but the target has only {available} "
                          f"(its code would stop with SIGILL); use bf16-units={available} or auto")
    return requested
