"""`slicer-apply-tactics`: IR annotations and a schedule of tactics -> `slicer.loop`/`slicer.slice`
(`slicer.tactics`, docs/tactics.md).

Options: `tactics` (the schedule as text, see slicer.tactics.TEXT_SYNTAX), `entry` (the function the
schedule refers to), `mesh` (the mesh of the schedule's axes: the name of a declared mesh, or `x=2,y=4` to
use the declared mesh of that shape or insert `slicer.mesh @mesh`), `check-each-step` (run the program
through the JIT after each tactic and compare with the original).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from mlir import ir

import slicer
from slicer.core.errors import InvalidTactic, Located, MeshError, OptionError, PassFailure, StepMismatch
from slicer.core.mesh import Mesh
from slicer.core.passes import ModulePass, register_pass
from slicer.tactics import TacticRewriter, parse_tactics

if TYPE_CHECKING:  # slicer.checking (the JIT) is loaded when a check is asked for: `slicer.checking` below
    import slicer.checking


@register_pass
@dataclass(frozen=True)
class SlicerApplyTactics(ModulePass):
    name = "slicer-apply-tactics"
    description = ("Rewrite tactics (slicer.sharding / slicer.annotate annotations, then the 'tactics' option, "
                   "e.g. arg0.1=y;result0.0=x,y;arg2=replicated) into slicer.loop/slicer.slice")

    tactics: str = ""
    entry: str = ""
    mesh: str = ""
    check_each_step: bool = False

    def __post_init__(self) -> None:
        try:
            parse_tactics(self.tactics)
        except InvalidTactic as exc:
            raise OptionError(f"pass '{self.name}' option 'tactics': {exc}") from None
        self.mesh_option()

    def mesh_option(self) -> str | Mesh | None:
        """None, a declared mesh's name, or the mesh `x=2,y=4`."""
        if not self.mesh:
            return None
        if "=" not in self.mesh:
            return self.mesh
        try:
            return Mesh.parse(self.mesh)
        except MeshError as exc:
            raise OptionError(f"pass '{self.name}' option 'mesh': {exc}") from None

    def apply(self, module: ir.Operation) -> None:
        after_each = None
        if self.check_each_step:
            original = str(module)
            after_each = lambda label: slicer.checking.check_equivalent(original, str(module), step=f"tactic {label}")  # noqa: E731
        try:
            TacticRewriter(module, parse_tactics(self.tactics), mesh=self.mesh_option(), entry=self.entry or None,
                           after_each=after_each).run()
        except StepMismatch as exc:
            raise PassFailure(Located(module.location, str(exc))) from None
