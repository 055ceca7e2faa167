"""Propagation of partitioning loops through a program (DESIGN.md sections 1 and 3).

The rule table (`slicer.rules`) says how an op computes block-wise when one of
its dims is tiled; `laws` are the rewrites of the loop/slice calculus
(deforestation, commuting slices into loops, backward into producers, forward
into consumers, hoisting, dead loops); `engine` applies them to a fixpoint and
reports conflicts.
"""
