"""Command-line tools (layer 16 of docs/architecture.md): `slicer-opt`, `slicer-plan`, `slicer-run`, and the
convention they share (`cli`: flags and exit codes).

`collectives_text` (`slicer-opt --print-collectives`) is loaded when first read (PEP 562, `slicer.core.lazy`): a
slicer-opt run that does not print the report does not load the partitioner it reads."""

from typing import TYPE_CHECKING

from slicer.core.lazy import lazy_exports

if TYPE_CHECKING:  # the lazy name for type checkers (PEP 562 hides it); nothing is imported at run time
    from .print_collectives import collectives_text

__all__ = ["collectives_text"]
__getattr__, __dir__ = lazy_exports(__name__, {"collectives_text": ".print_collectives"})
