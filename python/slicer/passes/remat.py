"""`slicer-remat`: the forward computation of the modules a pattern names recomputed just before their backward
use instead of kept (`slicer.spmd.rematerialize`, docs/remat.md)."""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from slicer.core.errors import InvalidTactic, OptionError
from slicer.core.passes import ModulePass, register_pass
from slicer.spmd.rematerialize import POLICIES, check_policy, rematerialize


@register_pass
@dataclass(frozen=True)
class SlicerRemat(ModulePass):
    name = "slicer-remat"
    description = "Recompute the forward of the modules matching a pattern in the backward pass (rematerialisation)"

    pattern: str = ""
    """Module paths to recompute (`blocks.*`: each block; `*` crosses dots)."""
    policy: str = "full"
    """What each recomputed module still saves: full, save_dots, save_names, none."""
    names: tuple[str, ...] = ()
    """For save_names: module paths (or patterns) whose values are saved."""

    def __post_init__(self) -> None:
        if not self.pattern:
            raise OptionError("pass 'slicer-remat' needs pattern=<module paths> (e.g. pattern=blocks.*)")
        if self.policy not in POLICIES:
            raise OptionError(f"pass 'slicer-remat' option 'policy' must be one of {', '.join(POLICIES)}, got "
                              f"'{self.policy}'")
        try:
            check_policy(self.policy, self.names)
        except InvalidTactic as exc:
            raise OptionError(f"pass 'slicer-remat': {exc}") from None

    def apply(self, module: ir.Operation) -> None:
        rematerialize(module, self.pattern, self.policy, self.names)
