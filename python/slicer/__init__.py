"""Slicer: partition linalg-on-tensors programs over a device mesh."""
