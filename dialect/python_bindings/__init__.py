"""Where the MLIR Python bindings look for the `slicer` dialect's Python module (see `slicer.py`)."""
