"""Tactic values: immutable, validated when built, with a text form for the command line."""

import dataclasses

import pytest

import slicer
from slicer.tactics import InvalidTactic, format_tactics, parse_tactics


def test_tile_normalizes_axes_and_is_frozen():
    tile = slicer.Tile(arg=1, dim=0, axes="y")
    assert tile.axes == ("y",)
    assert tile == slicer.Tile(arg=1, dim=0, axes=["y"])
    assert slicer.Tile(result=0, dim=1, axes=("x", "y")).axes == ("x", "y")
    with pytest.raises(dataclasses.FrozenInstanceError):
        tile.dim = 2
    assert hash(tile) == hash(slicer.Tile(arg=1, dim=0, axes=("y",)))


def test_repr_names_the_tactic_as_written():
    assert repr(slicer.Tile(arg=3, dim=0, axes="x")) == "Tile(arg=3, dim=0, axes='x')"
    assert repr(slicer.Tile(result=0, dim=1, axes=("x", "y"))) == "Tile(result=0, dim=1, axes=('x', 'y'))"
    assert repr(slicer.Replicate(arg=2)) == "Replicate(arg=2)"


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: slicer.Tile(dim=0, axes="x"), "give exactly one of arg= or result="),
        (lambda: slicer.Tile(arg=0, result=0, dim=0, axes="x"), "give exactly one of arg= or result="),
        (lambda: slicer.Replicate(), "give exactly one of arg= or result="),
        (lambda: slicer.Tile(arg=-1, dim=0, axes="x"), "arg=-1 must be a position"),
        (lambda: slicer.Tile(arg="", dim=0, axes="x"), "arg='' must be a non-empty name"),
        (lambda: slicer.Replicate(arg="a=b"), "must be a non-empty name without '=', ';'"),
        (lambda: slicer.Replicate(result=True), "result=True must be a position"),
        (lambda: slicer.Tile(arg=0, dim=-1, axes="x"), "dim=-1 must be an int >= 0"),
        (lambda: slicer.Tile(arg=0, dim=0, axes=()), "give at least one mesh axis (use Replicate"),
        (lambda: slicer.Tile(arg=0, dim=0, axes=("x", "x")), "axis 'x' is listed twice"),
        (lambda: slicer.Tile(arg=0, dim=0, axes=("x", "")), "axis '' must be a non-empty mesh axis name"),
        (lambda: slicer.Tile(arg=0, dim=0, axes=3), "axes must be an axis name or a sequence"),
    ],
)
def test_invalid_values_say_how_to_fix(build, message):
    with pytest.raises(InvalidTactic) as info:
        build()
    assert message in str(info.value)


def test_text_form_round_trips():
    text = "arg0.1=y;result0.0=x,y;arg2=replicated;result1=replicated"
    tactics = parse_tactics(text)
    assert tactics == (
        slicer.Tile(arg=0, dim=1, axes="y"),
        slicer.Tile(result=0, dim=0, axes=("x", "y")),
        slicer.Replicate(arg=2),
        slicer.Replicate(result=1),
    )
    assert format_tactics(tactics) == text
    assert parse_tactics(" arg0.0=x ; ") == (slicer.Tile(arg=0, dim=0, axes="x"),)
    assert parse_tactics("") == ()


def test_names_in_the_text_form():
    """Arguments named in the program (an imported model's parameters) are named in the text form too: the last
    `.D` before `=` is the dim, and a replicated name is everything before `=`."""
    text = "mlp.fc1.weight.0=y;layers.0.weight.1=x,y;mlp.fc1.bias=replicated;layers.0=replicated;x.0=x"
    tactics = parse_tactics(text)
    assert tactics == (
        slicer.Tile(arg="mlp.fc1.weight", dim=0, axes="y"),
        slicer.Tile(arg="layers.0.weight", dim=1, axes=("x", "y")),
        slicer.Replicate(arg="mlp.fc1.bias"),
        slicer.Replicate(arg="layers.0"),
        slicer.Tile(arg="x", dim=0, axes="x"),
    )
    assert format_tactics(tactics) == text
    assert repr(tactics[0]) == "Tile(arg='mlp.fc1.weight', dim=0, axes='y')"


@pytest.mark.parametrize(
    "text, message",
    [
        ("arg0.x=y", "cannot parse tactic 'arg0.x=y': expected argI.D=AXES"),
        ("result1.w=y", "cannot parse tactic 'result1.w=y'"),
        ("=y", "cannot parse tactic '=y'"),
        ("fc1.weight=y", "say which dim to tile (fc1.weight.D=y) or write fc1.weight=replicated"),
        ("arg0=y", "say which dim to tile (arg0.D=y) or write arg0=replicated"),
        ("arg0.1=replicated", "a replicated value has no dim; write arg0=replicated"),
        ("arg0.1=x,,y", "empty axis name"),
        ("arg0.1=x,x", "tactic 'arg0.1=x,x': Tile(arg=0, dim=1, axes=('x', 'x')): axis 'x' is listed twice"),
    ],
)
def test_text_errors_name_the_item(text, message):
    with pytest.raises(InvalidTactic) as info:
        parse_tactics(text)
    assert message in str(info.value)
