"""`slicer-auto`: search the tactics of the entry function (`slicer.automatic`, docs/tactics.md "Automatic
partitioning") and apply them as `slicer-apply-tactics` would, so the output is the loop program of the chosen
tactics; the entry function records them in their text form (`slicer.auto_tactics`).

Options: `mesh` (required, `x=2,y=2`), `memory-budget` (bytes per device: `2GiB`, `512MiB`, `1000000`; empty:
no limit), `objective` (`time` or `memory`), `tactics` (the user's own, kept first), `entry`.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from slicer.automatic import search_tactics
from slicer.automatic.options import check_objective, parse_budget
from slicer.core.errors import AutoError, InvalidTactic, Located, MeshError, OptionError, PassFailure
from slicer.core.functions import entry_function
from slicer.core.mesh import Mesh
from slicer.core.names import AUTO_TACTICS_ATTR
from slicer.core.passes import ModulePass, register_pass
from slicer.tactics import TacticRewriter, parse_tactics


@register_pass
@dataclass(frozen=True)
class SlicerAuto(ModulePass):
    name = "slicer-auto"
    description = ("Search the tactics of the entry function on a mesh within a memory budget "
                   "(mesh=x=2,y=2 memory-budget=2GiB) and apply them")

    mesh: str = ""
    memory_budget: str = ""
    objective: str = "time"
    tactics: str = ""
    entry: str = ""

    def __post_init__(self) -> None:
        if not self.mesh:
            raise OptionError(f"pass '{self.name}' needs option 'mesh' (e.g. mesh=x=2,y=2)")
        try:
            Mesh.parse(self.mesh)
            parse_budget(self.memory_budget or None)
            check_objective(self.objective)
            parse_tactics(self.tactics)
        except (MeshError, AutoError, InvalidTactic) as exc:
            raise OptionError(f"pass '{self.name}': {exc}") from None

    def apply(self, module: ir.Operation) -> None:
        mesh = Mesh.parse(self.mesh)
        try:
            found = search_tactics(str(module), mesh, memory_budget=self.memory_budget or None,
                                   tactics=parse_tactics(self.tactics), objective=self.objective,
                                   entry=self.entry or None)
        except AutoError as exc:
            raise PassFailure(Located(module.location, str(exc))) from None
        func = entry_function(module, self.entry or None)
        TacticRewriter(module, found.tactics, mesh=mesh, entry=self.entry or None).run()
        func.attributes[AUTO_TACTICS_ATTR] = ir.StringAttr.get(found.text())
