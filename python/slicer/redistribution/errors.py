"""The single exception type of the redistribution package.

Every invalid mesh, type, spec, plan or dtype raises :class:`RedistributionError` (a ``ValueError``) whose
message names the offending axis / dim / spec and says what would fix it, so that the CLI and the compiler
can show it to users verbatim.
"""


class RedistributionError(ValueError):
    """Invalid input to the redistribution machinery (mesh, distributed type, plan, dtype)."""
