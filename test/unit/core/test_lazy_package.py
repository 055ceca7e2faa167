"""A low layer imports alone: `slicer`'s `__init__` (and `slicer.core`'s) resolve their public names when first
read (PEP 562), so `import slicer.core.names` loads neither the API, the code generators nor the runtime, and
needs no MLIR; the public names are still all there."""

import subprocess
import sys

import pytest


def _run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_importing_the_names_loads_no_higher_layer_and_no_mlir():
    out = _run("import sys\n"
               "sys.modules['mlir'] = None  # importing mlir now fails: the names must not need it\n"
               "import slicer.core.names\n"
               "print(' '.join(sorted(m for m in sys.modules if m.startswith('slicer'))))\n")
    loaded = set(out.split())
    assert "slicer.core.names" in loaded
    for heavy in ("slicer.api", "slicer.lowering", "slicer.runtime", "slicer.passes", "slicer.dialect"):
        assert not any(m == heavy or m.startswith(heavy + ".") for m in loaded), (heavy, sorted(loaded))


def test_the_public_names_resolve_and_are_listed():
    import slicer

    for name in slicer.__all__:
        assert getattr(slicer, name) is not None, name
    assert set(slicer.__all__) <= set(dir(slicer))
    from slicer import Mesh, compile

    assert compile is slicer.compile and Mesh is slicer.Mesh


def test_an_unknown_name_is_an_attribute_error_and_a_slicer_error():
    import slicer

    assert not hasattr(slicer, "no_such_name")
    with pytest.raises(slicer.UnknownName, match="no attribute 'no_such_name'"):
        slicer.no_such_name  # noqa: B018
    with pytest.raises(ImportError):
        from slicer import no_such_name  # noqa: F401


def test_a_subpackage_is_an_attribute_after_import_slicer():
    out = _run("import slicer\nprint(slicer.tactics.Tile.__name__)\n")
    assert out.strip() == "Tile"
