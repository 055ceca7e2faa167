"""Load the IRDL definition of the `slicer` dialect into an MLIR context.

The dialect has a single source of truth, `slicer.irdl.mlir` next to this file;
plain `mlir-opt --irdl-file=<that file>` loads exactly the same definition.
Definitions added with `add_definition` (the ops of a collective kind defined
outside the package) load into every context as well.
"""

from __future__ import annotations

import weakref
from pathlib import Path

from mlir import ir
from mlir._mlir_libs import _mlir
from mlir.dialects import irdl

from slicer.core.names import BUILT_DIALECTS

IRDL_PATH = Path(__file__).with_name("slicer.irdl.mlir")

# Let the bindings find a Python module for the dialect (dialect/python_bindings/slicer.py says why).
if __package__ + ".python_bindings" not in _mlir.globals.dialect_search_modules:
    _mlir.globals.append_dialect_search_prefix(__package__ + ".python_bindings")

# Contexts that already hold the dialect. IRDL registration is per context and
# loading twice would register the dialect twice, so we remember it here.
_loaded: weakref.WeakSet[ir.Context] = weakref.WeakSet()
# IRDL texts of other dialects, loaded after the `slicer` dialect (`add_definition`).
_extra: list[str] = []


def add_definition(irdl_text: str) -> None:
    """Load the IRDL dialect(s) of `irdl_text` into every context `load_dialect` prepares from now on (a new
    collective whose op neither `shard` nor `slicer` has: docs/architecture.md, "A new collective")."""
    if irdl_text not in _extra:
        _extra.append(irdl_text)


def load_dialect(context: ir.Context | None = None) -> ir.Context:
    """Register the `slicer` dialect in `context` (default: the current one); idempotent."""
    context = context or ir.Context.current
    if context in _loaded:
        return context
    for text in [IRDL_PATH.read_text(), *_extra]:
        irdl.load_dialects(ir.Module.parse(text, context))
    _loaded.add(context)
    return context


def make_context() -> ir.Context:
    """A fresh context with the dialects Slicer builds ops of and the `slicer` dialect loaded; every other
    registered dialect loads on first use (parsing, a pass's dependent dialects)."""
    context = ir.Context(load_on_create_dialects=BUILT_DIALECTS)
    load_dialect(context)
    return context
