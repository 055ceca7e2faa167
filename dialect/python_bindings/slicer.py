"""The Python module of the `slicer` dialect, as the MLIR Python bindings look one up.

The bindings import `<prefix>.<dialect namespace>` for every dialect whose types, attributes or ops they
wrap, and do not remember a failure: without a module to find, every access to a `!slicer.range` type tried
(and failed) to import `mlir.dialects.slicer` again, two thirds of the time of partitioning a transformer
block (measured: 9,796 failed imports). `loader.py` adds this package as a search prefix. The dialect is
IRDL-defined, so there are no generated op classes to put here: typed views live in `slicer.dialect.ops`.
"""
