"""The layer every stage builds on (docs/architecture.md): errors, IR names, the dtype table, the one
`Mesh`, entry-function lookup, the pass base class and the pipeline runner, tool discovery.

Nothing here imports another part of Slicer. The errors and `Mesh` need nothing else and are loaded with the
package; the entry-function helpers (which need MLIR) when first read (`core.lazy`), so importing one module
of this layer (`slicer.core.names`) needs no MLIR.
"""

from typing import TYPE_CHECKING

from .errors import *  # noqa: F403 - the error catalogue is part of this layer's interface
from .errors import __all__ as _errors
from .lazy import lazy_exports
from .mesh import Mesh

if TYPE_CHECKING:  # the lazy names for type checkers (PEP 562 hides them); nothing is imported at run time
    from .functions import defined_functions, entry_function, function_name, function_type

__all__ = [*_errors, "Mesh", "defined_functions", "entry_function", "function_name", "function_type"]
__getattr__, __dir__ = lazy_exports(__name__, {name: ".functions" for name in __all__[len(_errors) + 1:]})
