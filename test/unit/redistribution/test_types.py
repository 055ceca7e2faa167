"""Mesh and DistType: construction, text form, validation errors."""

import pytest

from slicer.redistribution import DistType, Mesh, RedistributionError, numpy_dtype, parse_shape, parse_type_text


def test_mesh_basics():
    m = Mesh(x=2, y=4)
    assert m.axis_names == ("x", "y") and m.shape == (2, 4) and m.device_count == 8
    assert m.size("y") == 4 and str(m) == "x=2,y=4" and repr(m) == "Mesh(x=2, y=4)"
    assert Mesh.parse(" x = 2 , y=4") == m and hash(Mesh.parse("x=2,y=4")) == hash(m)
    assert Mesh([("x", 2), ("y", 4)]) == m and Mesh(y=4, x=2) != m
    # row-major, first axis most significant (MPI Cart / shard convention)
    assert [m.coords(r) for r in range(8)][:5] == [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0)]
    assert all(m.rank(m.coords(r)) == r for r in range(8))
    with pytest.raises(AttributeError):
        m.foo = 1


@pytest.mark.parametrize("make, words", [
    (lambda: Mesh(x=0), "positive"),
    (lambda: Mesh(x=-2), "positive"),
    (lambda: Mesh(x=2.5), "positive integers"),
    (lambda: Mesh([("x", 2), ("x", 4)]), "duplicate"),
    (lambda: Mesh([("1x", 2)]), "invalid mesh axis name"),
    (lambda: Mesh.parse("x=2,y"), "name=size"),
    (lambda: Mesh.parse("x=two"), "positive integers"),
    (lambda: Mesh(x=2).size("q"), "unknown mesh axis 'q'"),
])
def test_mesh_errors(make, words):
    with pytest.raises(RedistributionError, match=words):
        make()


def test_parse_and_format_round_trip():
    m = Mesh(x=2, y=4, z=2)
    t = DistType.parse('[["x", "y"], []]', (16, 8), m)
    assert t.dims == (("x", "y"), ()) and t.partial == () and str(t) == "[[x,y],[]]"
    p = DistType.parse("[ [x] , [ ] ]  partial = [ z , y ]", (16, 8), m)
    assert p.partial == ("y", "z") and str(p) == "[[x],[]] partial=[y,z]"  # canonical mesh order
    assert DistType.parse(str(p), (16, 8), m) == p
    assert t.local_shape(m) == (2, 8) and t.local_size(m) == 16
    assert parse_type_text("[[],[y]]") == (((), ("y",)), ())


@pytest.mark.parametrize("spec, shape, words", [
    ("[[q],[]]", (8, 8), "unknown mesh axis 'q' in dim 0"),
    ("[[x],[x]]", (8, 8), "used twice"),
    ("[[x],[]] partial=[x]", (8, 8), "used twice"),
    ("[[x],[]] partial=[q]", (8, 8), "unknown mesh axis 'q' in partial"),
    ("[[x,y],[]]", (12, 8), "dim 0 of size 12 is not divisible by 8"),
    ("[[x]]", (8, 8), "has 1 dims but the shape 8x8 has rank 2"),
    ("[x,y]", (8, 8), "each dim needs its own list"),
    ("[[x],[]", (8, 8), "invalid distributed type"),
    ("[[x] [y]]", (8, 8), "missing ','"),
    ("x", (8, 8), "one axis list per dim"),
])
def test_type_errors(spec, shape, words):
    with pytest.raises(RedistributionError, match=words.replace("[", r"\[")):
        DistType.parse(spec, shape, Mesh(x=2, y=4))


def test_dtypes_and_shapes():
    assert numpy_dtype("f32").itemsize == 4 and numpy_dtype("i64").itemsize == 8 and numpy_dtype("f16").itemsize == 2
    assert numpy_dtype("bf16").itemsize == 2 and numpy_dtype("bf16").name == "bfloat16"
    with pytest.raises(RedistributionError, match="supported: bf16, f16, f32, f64, i1, i8, i16, i32, i64"):
        numpy_dtype("f8E5M2")
    with pytest.raises(RedistributionError, match="not supported"):
        numpy_dtype("f8")
    assert parse_shape("1024x512") == (1024, 512) and parse_shape("7") == (7,)
    for bad in ("", "8x", "0x4", "axb"):
        with pytest.raises(RedistributionError):
            parse_shape(bad)
