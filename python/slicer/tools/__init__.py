"""Command-line tools (layer 16 of docs/architecture.md): `slicer-opt`, `slicer-plan`, `slicer-run`, and the
convention they share (`cli`: flags and exit codes)."""
