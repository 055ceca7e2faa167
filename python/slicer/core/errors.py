"""Every error Slicer raises for something a user can change, in one place (the catalogue in docs/errors.md).

All derive from `SlicerError`, so a tool catches one class and prints the message: each message says what is
wrong (naming the op, axis, dim, tactic or file, and where) and what would fix it. Anything else that escapes
(a `KeyError`, an `IndexError`, "internal error in slicer pass ...") is a bug in Slicer.

Details: docs/module-notes.md, `core/errors.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the catalogue itself needs no MLIR: `import slicer.core.names` stays light
    from mlir import ir


class SlicerError(Exception):
    """Base of every user-facing Slicer error; the message says what to change."""


class CompileError(SlicerError, ValueError):
    """The program cannot be partitioned or compiled as asked (the message has the located diagnostics)."""


@dataclass(frozen=True)
class Located:
    """A message attached to an IR location."""

    location: ir.Location
    message: str


class PassFailure(CompileError):
    """A pass found errors in its input; each is reported at its location (`.diagnostics`)."""

    def __init__(self, diagnostics: list[Located] | Located):
        self.diagnostics = diagnostics if isinstance(diagnostics, list) else [diagnostics]
        super().__init__("; ".join(d.message for d in self.diagnostics))

    def __str__(self) -> str:
        return "\n".join(d.message for d in self.diagnostics)


class TacticError(PassFailure):
    """Tactics that do not fit the program or mesh; `.diagnostics` are located (func or annotate op)."""


class PipelineError(CompileError):
    """A pass pipeline that does not parse, names an unknown pass, or gives a bad option."""


class StepMismatch(CompileError):
    """check-each-step: the program after a step computes something else than before it."""


class AutoError(CompileError):
    """Automatic partitioning (`slicer.auto`) cannot search as asked: a bad mesh, memory budget or objective, or
    no partitioning it found fits the memory budget (the message names the smallest peak found)."""


class BudgetExceeded(CompileError):
    """A compile stage stopped at its budget instead of hanging: propagation that exceeds a number of rewrites
    proportional to the program (it names the law that kept rewriting and saves a reproducer), or a kernel whose
    LLVM compile exceeds its time limit (it names the kernel, its size and its largest op). Either is a bug in
    Slicer to report with the reproducer, not a problem of the user's program."""


class InvalidTactic(SlicerError, ValueError):
    """A tactic value that is wrong on its own (before looking at any program)."""


class FrontendError(SlicerError, ValueError):
    """A model or function that cannot be imported: the framework is not installed, the inputs are not
    tensors, or its exporter failed (the message says which and how to fix it)."""


class RedistributionError(SlicerError, ValueError):
    """An invalid distributed type, plan, dtype or text form for the redistribution machinery."""


class MeshError(RedistributionError):
    """A malformed mesh, or an axis or rank it does not have (a mesh is the redistribution's first input)."""


class KernelError(SlicerError, ValueError):
    """A kernel that cannot be compiled or called as asked (wrong arrays, unsupported buffers)."""


class JitError(KernelError):
    """The JIT cannot compile or call a function as asked."""


class KernelGraphError(SlicerError, ValueError):
    """An SPMD function that cannot be cut into kernels and collectives (says which op and why)."""


class VizError(SlicerError, ValueError):
    """A value, picture or timeline that cannot be shown as asked (unknown value, no matplotlib, no timeline)."""


class RunError(SlicerError, RuntimeError):
    """A run failed: bad arguments, or a rank failed (the message has that rank's traceback)."""


class InputError(RunError):
    """An input array or file that does not match the program (says which and why)."""


class LaunchError(RunError):
    """The SPMD job could not be started or did not finish (says why and how to fix it)."""


class ResourceError(RunError):
    """The job does not fit this host (too many ranks for its cores, or blocks larger than its memory)."""


class CheckpointError(RunError):
    """A checkpoint that cannot be written or loaded: a directory without a manifest, a file missing, truncated
    or changed since it was written (checksums), or state that does not match the session's program."""


class SimulationError(RunError):
    """The in-process simulator cannot run the SPMD function, or its devices disagree."""


class KernelAssertionError(RunError):
    """A check the program makes on its data failed while a kernel ran (e.g. an embedding index out of range)."""


class PropagationError(BudgetExceeded):
    """Propagation exceeded its budget (a bug: the laws should always terminate). The message names the law
    that kept rewriting and the command that reproduces it on a saved copy of the input."""


class Unsupported(CompileError):
    """A component declines an input it does not handle; its caller catches it and tries another way."""


class NoRule(Unsupported):
    """An op has no propagation rule (neither a linalg op nor an explicit entry in `slicer.rules.explicit`):
    propagation leaves a slice of its result where it is, and a tiled value reaching it is a located error."""


class InternalError(SlicerError):
    """An invariant of Slicer does not hold: a bug in Slicer (not in the user's program); report it."""


class UnknownName(SlicerError, AttributeError):
    """`slicer.<name>` (or a lazy subpackage's) for a name the package does not have; an `AttributeError` too,
    so `hasattr` and `getattr` with a default behave as for any module."""


class NotAContraction(Unsupported):
    """The contraction generator (`lowering/contract/`) declines a generic; it goes to tile-and-vectorize."""


class NotRowwise(Unsupported):
    """The row-kernel generator (`lowering/rows/`) declines an op; it goes to tile-and-vectorize."""


INTERNAL = ("Unsupported", "NoRule", "NotAContraction", "NotRowwise")
"""Classes Slicer raises and catches itself (a component declining an input): documented in docs/errors.md as
internal, not exported from `slicer`. Seeing one escape is a bug in Slicer."""

class DialectError(CompileError):
    """Slicer-dialect IR that is malformed (an attribute of the wrong kind, a mesh whose axes and sizes
    disagree, a builder given a value of the wrong type); `slicer-verify` reports it at the op."""


class OptionError(PipelineError):
    """A pass option that does not exist, does not parse as its type, or has a value the pass refuses (the
    message names the pass, the option and what it takes)."""


class EntryError(CompileError):
    """No function, or several, match the function a request refers to (`slicer.core.functions.entry_function`;
    the message lists the module's functions and says to name one). Stages that report their own error class
    (the JIT, the kernel graph, partitioning) catch it and raise theirs with this message."""


class SlicerWarning(UserWarning):
    """Base of Slicer's warnings: the program compiles and computes the right answer, but not as asked (the
    message says what was lost and what to change). Not a `SlicerError`: nothing stops."""


class DegradedStrategy(SlicerWarning):
    """A tactic's split was lost: an op it was meant to divide stays replicated (no rule, or a dim the devices do
    not divide, e.g. 6 heads on y=4), so the tactic's value is gathered and every device computes that op whole.
    `slicer.compile(..., strict=True)` raises a `TacticError` instead."""


__all__ = [
    "SlicerWarning", "DegradedStrategy",
    "SlicerError", "CompileError", "Located", "PassFailure", "TacticError", "PipelineError", "StepMismatch",
    "BudgetExceeded", "AutoError",
    "InvalidTactic", "FrontendError", "MeshError", "RedistributionError", "KernelError", "JitError",
    "KernelGraphError", "VizError", "RunError", "InputError", "LaunchError", "ResourceError", "CheckpointError",
           "SimulationError",
    "KernelAssertionError", "PropagationError", "Unsupported", "NoRule", "NotAContraction", "NotRowwise",
           "InternalError", "UnknownName", "OptionError", "EntryError", "DialectError",
]
