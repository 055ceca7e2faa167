"""The layer every stage builds on (docs/architecture.md): errors, IR names, the dtype table, the one
`Mesh`, entry-function lookup, the pass base class and the pipeline runner, tool discovery.

Nothing here imports another part of Slicer.
"""

from .errors import *  # noqa: F401,F403 - the error catalogue is part of this layer's interface
from .errors import __all__ as _errors
from .functions import defined_functions, entry_function, function_name, function_type
from .mesh import Mesh

__all__ = [*_errors, "Mesh", "defined_functions", "entry_function", "function_name", "function_type"]
