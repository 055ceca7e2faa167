"""Lazy package attributes (PEP 562): a package names what it exports and the module each name comes from,
and imports that module only when the name is first read.

So `import slicer.core.names` loads the package's `__init__` and two small modules, not the whole compiler
(the API, the code generators, the runtime); `from slicer import compile`, `slicer.Mesh` and `dir(slicer)`
work as before. A subpackage read as an attribute (`slicer.lowering` after `import slicer`) is imported then.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable

from .errors import UnknownName


def lazy_exports(package: str, exports: dict[str, str]) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The module `__getattr__` and `__dir__` of `package`, which exports each name of `exports` from the
    module it maps to (relative to `package`, e.g. ``".api"``); a name mapped to ``".<name>"`` is that
    submodule itself."""

    def __getattr__(name: str) -> object:
        module = exports.get(name)
        if module == f".{name}":  # a submodule exported under its own name (`slicer.strategies`)
            value = importlib.import_module(module, package)
        elif module is not None:
            value = getattr(importlib.import_module(module, package), name)
        elif not name.startswith("__") and importlib.util.find_spec(f"{package}.{name}") is not None:
            value = importlib.import_module(f"{package}.{name}")
        else:
            raise UnknownName(f"module '{package}' has no attribute '{name}'")
        setattr(sys.modules[package], name, value)  # read once: later reads do not come here
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(exports))

    return __getattr__, __dir__
