"""Slicer passes: one file per pass, a lazy registry, and pipeline parsing."""
