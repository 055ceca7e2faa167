"""Run one case through slicer and classify it (runs inside a worker process, see `worker.py`).

Classes (`Outcome.kind`):
- `ok`: every run matched the numpy reference;
- `clean-error`: tactic construction or `slicer.compile` raised a documented error class (errors.py) whose
  message does not say "internal error";
- `internal-error`: anything else raised, a message saying "internal error" or carrying a traceback, a
  worker that crashed, and *any* failure of a run after a successful compile (the inputs are valid by
  construction, so a program slicer accepted must run);
- `wrong`: a run's results differ from the reference (`programs.compare`);
- `hang`: the case exceeded its time limit (decided by the parent, `worker.py`).

Stages: `tactic` (building slicer.Tile/Replicate), `compile`, `run-sim`/`check-sim` (the in-process SPMD
simulator, `ranks=None`, whose kernels are JIT-compiled), `run-aot`/`check-aot` (the simulator again with the
kernels the MPI ranks load: AOT-compiled by the vectorizing pipeline, `slicer.runtime.execution.executor.load_kernels`,
each on copies of its inputs against a page with no access, so that a read past an operand faults: `guarded.py`;
as cheap as the simulator, so many more cases test that pipeline than MPI could), `run-mpi`/`check-mpi`
(`ranks=N` MPI ranks).
"""

from __future__ import annotations

import time
import traceback
from dataclasses import asdict, dataclass

import numpy as np

from .cases import Case
from .errors import is_clean, signature
from .guarded import GuardedInputs
from .programs import compare

KINDS = ("ok", "clean-error", "internal-error", "wrong", "hang")
FAILURES = ("internal-error", "wrong", "hang")


@dataclass
class Outcome:
    kind: str
    stage: str = ""
    type: str = ""
    message: str = ""
    signature: str = ""
    max_diff: float | None = None
    seconds: float = 0.0

    def to_json(self) -> dict:
        return asdict(self)

    @staticmethod
    def from_json(d: dict) -> Outcome:
        return Outcome(**d)

    @property
    def failed(self) -> bool:
        return self.kind in FAILURES

    def short(self) -> str:
        if self.kind == "ok":
            return "ok"
        if self.kind == "wrong":
            return f"wrong ({self.stage}): {self.message}"
        first = self.message.strip().splitlines()[0] if self.message.strip() else ""
        return f"{self.kind} ({self.stage}): {self.type}: {first}"


def _message(exc: BaseException) -> str:
    text = str(exc)
    if not is_clean(exc):
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        text = f"{text}\n{tb}"
    return text[-6000:]


def _error(exc: BaseException, stage: str, *, run_stage: bool = False) -> Outcome:
    name = type(exc).__name__
    text = str(exc)
    if run_stage and name == "LaunchError" and "did not finish within" in text:
        kind = "hang"
    elif run_stage:
        kind = "internal-error"
    else:
        kind = "clean-error" if is_clean(exc) else "internal-error"
    return Outcome(kind, stage, name, _message(exc), signature(kind, stage, name, text))


def _wrong(stage: str, mismatch) -> Outcome:
    return Outcome("wrong", stage, "", str(mismatch), signature("wrong", stage, "", ""), mismatch.max_diff)


def corrupt_results(got):
    """A deliberately wrong copy of `got` (used to check that the checker catches wrong answers)."""
    many = isinstance(got, tuple)
    arrays = [np.array(a) for a in (got if many else (got,))]
    a = arrays[0]
    flat = a.reshape(-1)
    if flat.size:
        flat[0] = flat[0] + (1 if a.dtype.kind == "i" else 0.5 + abs(flat[0]))
    return tuple(arrays) if many else arrays[0]


def execute(case: Case, *, mpi: bool = False, aot: bool = False, corrupt: bool = False,
            mpi_timeout: float = 120.0) -> Outcome:
    start = time.perf_counter()
    outcome = _execute(case, mpi=mpi, aot=aot, corrupt=corrupt, mpi_timeout=mpi_timeout)
    outcome.seconds = round(time.perf_counter() - start, 3)
    return outcome


def _run_aot(prog, inputs):
    """The simulator with the MPI ranks' kernels (AOT, or the JIT where the runtime falls back to it), each kernel
    on copies of its inputs against a page with no access (`guarded.py`): a read past an operand faults."""
    from slicer.runtime import Simulator

    simulator = Simulator(prog.graph, backend="native")
    simulator.kernels = {name: GuardedInputs(kernel) for name, kernel in simulator.kernels.items()}
    return simulator(*inputs)


def _execute(case: Case, *, mpi: bool, aot: bool, corrupt: bool, mpi_timeout: float) -> Outcome:
    import slicer

    program = case.program
    inputs = program.random_inputs(case.seed)
    reference = program.evaluate(inputs)
    try:
        tactics = [t.build() for t in case.tactics]
    except Exception as exc:  # noqa: BLE001 - classified
        return _error(exc, "tactic")
    try:
        prog = slicer.compile(case.mlir, mesh=slicer.Mesh(**case.mesh), tactics=tactics)
    except Exception as exc:  # noqa: BLE001
        return _error(exc, "compile")
    try:
        got = prog.run(*[a.copy() for a in inputs], ranks=None)
    except Exception as exc:  # noqa: BLE001
        return _error(exc, "run-sim", run_stage=True)
    if corrupt:
        got = corrupt_results(got)
    mismatch = compare(program, reference, got)
    if mismatch is not None:
        return _wrong("check-sim", mismatch)
    if aot:
        try:
            got = _run_aot(prog, [a.copy() for a in inputs])
        except Exception as exc:  # noqa: BLE001
            return _error(exc, "run-aot", run_stage=True)
        mismatch = compare(program, reference, got)
        if mismatch is not None:
            return _wrong("check-aot", mismatch)
    if mpi:
        try:
            got = prog.run(*[a.copy() for a in inputs], ranks=case.devices, timeout=mpi_timeout, oversubscribe=True)
        except Exception as exc:  # noqa: BLE001
            return _error(exc, "run-mpi", run_stage=True)
        mismatch = compare(program, reference, got)
        if mismatch is not None:
            return _wrong("check-mpi", mismatch)
    return Outcome("ok", "check-mpi" if mpi else "check-aot" if aot else "check-sim")


def check_jit(case: Case) -> Outcome:
    """The unpartitioned program through the project's JIT vs the numpy reference (validates the
    reference, not slicer's partitioner)."""
    from slicer.lowering import compile_function

    program = case.program
    inputs = program.random_inputs(case.seed)
    reference = program.evaluate(inputs)
    try:
        got = compile_function(case.mlir)(*inputs)
    except Exception as exc:  # noqa: BLE001
        return _error(exc, "jit", run_stage=True)
    mismatch = compare(program, reference, got)
    return _wrong("check-jit", mismatch) if mismatch else Outcome("ok", "check-jit")
