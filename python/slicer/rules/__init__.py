"""Propagation rules as data, derived from linalg indexing maps (DESIGN.md section 3)."""
