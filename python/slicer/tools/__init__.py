"""Command-line tools: slicer-opt."""
