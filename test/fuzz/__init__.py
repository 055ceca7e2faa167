"""Differential fuzzer for Slicer (issue 12).

Random well-typed linalg-on-tensors programs (`programs.py`) with random meshes
and tactics (`schedules.py`) are partitioned by `slicer.compile`, run by the
SPMD simulator (and a sample on MPI ranks) and compared with an independent
numpy evaluation of the program (`programs.Program.evaluate`, which never calls
slicer code). See docs/fuzzing.md.

Import as the top-level package `fuzz` with `test/` on `sys.path` (the stdlib
already owns the name `test`).
"""
