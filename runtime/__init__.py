"""The MPI SPMD runtime: launcher, communicators per mesh axis, collective execution.

Empty until the launcher lands (issue 6); the redistribution executor lives in
`slicer.redistribution` meanwhile.
"""
