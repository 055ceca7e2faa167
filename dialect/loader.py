"""Load the IRDL definition of the `slicer` dialect into an MLIR context.

The dialect has a single source of truth, `slicer.irdl.mlir` next to this file;
plain `mlir-opt --irdl-file=<that file>` loads exactly the same definition.
"""

from __future__ import annotations

import sys
import types
import weakref
from pathlib import Path

from mlir import ir
from mlir.dialects import irdl

IRDL_PATH = Path(__file__).with_name("slicer.irdl.mlir")

# The bindings look for a Python module `mlir.dialects.<namespace>` whenever they build a type or attribute of a
# dialect, and do not remember a failed lookup: every `!slicer.range` parsed or read would search the file system
# for `mlir.dialects.slicer` again (measured: 80% of propagation time on a transformer block). The slicer dialect
# has no generated Python module (it is dynamic, IRDL); an empty one registered here ends the search.
sys.modules.setdefault("mlir.dialects.slicer", types.ModuleType("mlir.dialects.slicer",
                                                                "The IRDL-defined slicer dialect (see slicer.dialect)."))

# Contexts that already hold the dialect. IRDL registration is per context and
# loading twice would register the dialect twice, so we remember it here.
_loaded: "weakref.WeakSet[ir.Context]" = weakref.WeakSet()


def load_dialect(context: ir.Context | None = None) -> ir.Context:
    """Register the `slicer` dialect in `context` (default: the current one); idempotent."""
    context = context or ir.Context.current
    if context in _loaded:
        return context
    definition = ir.Module.parse(IRDL_PATH.read_text(), context)
    irdl.load_dialects(definition)
    _loaded.add(context)
    return context


def make_context() -> ir.Context:
    """A fresh context with every upstream dialect and the `slicer` dialect loaded."""
    context = ir.Context()
    load_dialect(context)
    return context
