"""The repository says where things are: every module of the package is named in its layer's entry of
docs/architecture.md, and the unit tests are filed by the layer they test.

- Modules: for each `.py` file of the package (python/slicer/ and the mapped dialect/, lowering/, runtime/;
  `__init__.py` and `__main__.py` exempt), its file name (e.g. `kernel_graph.py`) appears in the doc's entry
  for its layer (`slicer.lowering` for `lowering/kernel_graph.py`, `slicer.api` for the top-level `api.py`).
  A new module without a line in the doc fails here, and so does one named only under another layer.
- Tests: each folder of test/unit is named after a subpackage or a top-level module of the package
  (`test/unit/lowering/` tests `slicer.lowering`, `test/unit/api/` the top-level `api` and `checking`), except
  the folders in WHOLE_PIPELINE, which test everything from tactics to the runtime at once.
"""

import re
from pathlib import Path

from package_tree import package_dirs, package_files, relative

REPO = Path(__file__).resolve().parents[3]
UNIT = REPO / "test" / "unit"
DOC = REPO / "docs" / "architecture.md"
EXEMPT = {"__init__.py", "__main__.py"}
# Folders of test/unit that test the whole pipeline, not one layer.
WHOLE_PIPELINE = {
    "fuzz": "the differential fuzzer: random programs, meshes and tactics through every stage",
    "reliability": "regressions of the reliability issue, each a bug class that crossed several layers",
}
ITEM = re.compile(r"^\d+\.\s+\*\*`slicer\.(\w+)`\*\*", re.MULTILINE)


def package_modules() -> dict[str, list[str]]:
    """Layer (the first part of the module's path under slicer/) -> its modules' paths under slicer/."""
    layers: dict[str, list[str]] = {}
    for path in package_files():
        if path.name not in EXEMPT:
            module = relative(path)
            layers.setdefault(module.split("/")[0].removesuffix(".py"), []).append(module)
    return layers


def layer_entries(text: str) -> dict[str, str]:
    """`slicer.X` -> the text of its numbered entry in the section "The layers, bottom to top"."""
    section = text.split("## The layers", 1)[1].split("\n## ", 1)[0]
    starts = list(ITEM.finditer(section))
    return {m.group(1): section[m.start():(starts[i + 1].start() if i + 1 < len(starts) else len(section))]
            for i, m in enumerate(starts)}


def names_file(entry: str, file_name: str) -> bool:
    """The entry names `file_name` as a word of its own (`ops.py` is not named by `loops.py`)."""
    return re.search(rf"(?<![\w.]){re.escape(file_name)}(?!\w)", entry) is not None


def test_the_helpers_see_what_they_should():
    entries = layer_entries("# t\n## The layers, bottom to top\n\n1. **`slicer.core`** (`core/`): `names.py`.\n"
                            "2. **`slicer.dialect`**: `loops.py`,\n   `ops.py` on a second line.\n\n## Next\n"
                            "3. **`slicer.api`**: after the section.\n")
    assert set(entries) == {"core", "dialect"}
    assert names_file(entries["dialect"], "ops.py") and names_file(entries["core"], "names.py")
    assert not names_file(entries["core"], "ops.py") and not names_file("`loops.py`", "ops.py")
    assert not names_file("`test_rule_table.py`",
                          "table.py") and not names_file("`x.pyi`", "x.py") and names_file("in x.py.", "x.py")
    modules = package_modules()
    assert "lowering/kernel_graph.py" in modules["lowering"]  # through the lowering/ link
    assert "api.py" in modules["api"] and not any(m.endswith("__init__.py") for ms in modules.values() for m in ms)


def test_every_module_is_named_in_architecture_md():
    entries = layer_entries(DOC.read_text())
    missing = []
    for layer, modules in sorted(package_modules().items()):
        if layer not in entries:
            missing.append(f"slicer.{layer} has no entry in the layer list (modules: {', '.join(modules)})")
            continue
        missing += [f"{module} is not named in the entry of slicer.{layer}"
                    for module in modules if not names_file(entries[layer], Path(module).name)]
    assert not missing, ("docs/architecture.md, \"The layers, bottom to top\": name each module in its layer's "
                         "entry with a short phrase saying what it does:\n  " + "\n  ".join(missing))


def test_every_test_folder_is_named_after_a_layer():
    layers = set(package_modules()) | {name.split(".")[1] for name in package_dirs() if name.count(".") == 1}
    folders = {p.name for p in UNIT.iterdir() if p.is_dir() and p.name != "__pycache__" and not p.name.startswith(".")}
    strays = sorted(folders - layers - set(WHOLE_PIPELINE))
    assert not strays, (f"test/unit/{strays[0]}/ is not named after a subpackage or top-level module of slicer "
                        f"({', '.join(sorted(layers))}): move its tests to the folder of the layer they test "
                        "(git mv), or, if they test the whole pipeline, add the folder to WHOLE_PIPELINE in "
                        f"{Path(__file__).relative_to(REPO)} with a reason. Folders: {', '.join(strays)}")
    loose = sorted(p.name for p in UNIT.glob("test_*.py"))
    assert not loose, f"test/unit/ holds test files outside a layer folder: {', '.join(loose)}"
    assert set(WHOLE_PIPELINE) <= folders, "WHOLE_PIPELINE names a folder that is gone: remove it there"


def test_the_doc_lists_the_layers_in_the_contract_order():
    """docs/architecture.md numbers the layers bottom to top in the order of the import-linter contract
    (pyproject.toml lists them top to bottom): one order, the pipeline's, in both places."""
    import tomllib

    contract = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    layers = next(c["layers"] for c in contract if c["type"] == "layers")
    documented = [f"slicer.{name}" for name in layer_entries(DOC.read_text())]
    assert documented == list(reversed(layers))
