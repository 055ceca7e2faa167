"""The checkout's tree shows the layers as they are: python/slicer/ holds the package, the top-level dialect/,
lowering/ and runtime/ are mapped into it by pyproject.toml's `package-dir` (no symlinks, so every tool sees
each file once), and the list of packages there is exactly the folders with an `__init__.py`."""

import subprocess
import tomllib

from package_tree import MAPPED, REPO, package_dirs

import slicer.dialect
import slicer.lowering
import slicer.runtime


def _setuptools() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_the_checkout_has_no_symlinks():
    tracked = subprocess.run(["git", "ls-files", "-s"], capture_output=True, text=True, cwd=REPO, check=True)
    links = [line.split("\t")[1] for line in tracked.stdout.splitlines() if line.startswith("120000")]
    assert not links, f"symlinks in the checkout (map folders in pyproject.toml instead): {links}"


def test_the_mapped_folders_are_the_package_dirs_of_pyproject():
    mapping = _setuptools()["package-dir"]
    assert mapping == {"slicer": "python/slicer", **{f"slicer.{name}": name for name in MAPPED}}


def test_pyproject_lists_every_package_and_nothing_else():
    listed = sorted(_setuptools()["packages"])
    assert listed == package_dirs(), "pyproject.toml's [tool.setuptools] packages must list every package folder"


def test_the_installed_package_reads_the_checkouts_sources():
    for module, name in ((slicer.dialect, "dialect"), (slicer.lowering, "lowering"), (slicer.runtime, "runtime")):
        assert module.__file__ is not None
        assert open(module.__file__).read() == (MAPPED[name] / "__init__.py").read_text()
