"""The address behind an MLIR Python object: the identity of an op, a type or an attribute while it lives.

The bindings' `hash` is no identity (an op's changes with its operands), and printing a type to key it costs
more than the question it answers. Every object of the bindings carries a capsule (`_CAPIPtr`) around the C
pointer; `capsule_pointer(obj._CAPIPtr, <NAME>)` reads it. Called about a million times per training step
(`propagation.ir_utils.op_id`), hence PyCapsule_GetPointer through a ctypes prototype (no per-call argtypes
conversion: about 30% cheaper per call) and no wrapper function around it.
"""

from __future__ import annotations

import ctypes

capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))
OPERATION_CAPSULE = b"mlir.ir.Operation._CAPIPtr"
TYPE_CAPSULE = b"mlir.ir.Type._CAPIPtr"
ATTRIBUTE_CAPSULE = b"mlir.ir.Attribute._CAPIPtr"
