"""The `Remat` tactic value: checked when built, in the text form with the other tactics, round trip."""

import pytest

import slicer
from slicer.tactics import InvalidTactic, format_tactics, parse_tactics


def test_remat_defaults_to_full_and_normalizes_names():
    assert slicer.Remat(pattern="blocks.*").policy == "full"
    tactic = slicer.Remat(pattern="blocks.*", policy="save_names", names=["blocks.*.attn.q"])
    assert tactic.names == ("blocks.*.attn.q",) and hash(tactic)
    assert repr(tactic) == "Remat(pattern='blocks.*', policy='save_names', names=['blocks.*.attn.q'])"


@pytest.mark.parametrize("build, message", [
    (lambda: slicer.Remat(pattern=""), "pattern='' must be a module path"),
    (lambda: slicer.Remat(pattern="a=b"), "pattern='a=b' must be a module path"),
    (lambda: slicer.Remat(pattern="blocks.*", policy="some"), "policy='some' must be one of full, save_dots"),
    (lambda: slicer.Remat(pattern="blocks.*", policy="save_names"), "go with policy='save_names', and it needs"),
    (lambda: slicer.Remat(pattern="blocks.*", names=["x"]), "go with policy='save_names'"),
    (lambda: slicer.Remat(pattern="b", policy="save_names", names=["a(b)"]), "name 'a(b)' must be a module path"),
])
def test_bad_remat_values_say_what_to_change(build, message):
    with pytest.raises(InvalidTactic, match=None) as info:
        build()
    assert message in str(info.value)


def test_remat_text_form_round_trips_next_to_other_tactics():
    text = "arg0.1=y;remat:blocks.*=full;remat:blocks.*=save_names(blocks.*.attn.q,blocks.*.mlp.fc1);remat:h.*=none"
    tactics = parse_tactics(text)
    assert tactics[1] == slicer.Remat(pattern="blocks.*")
    assert tactics[2].names == ("blocks.*.attn.q", "blocks.*.mlp.fc1")
    assert format_tactics(tactics) == text
    assert parse_tactics(format_tactics(tactics)) == tactics


@pytest.mark.parametrize("text, message", [
    ("remat:blocks.*=most", "tactic 'remat:blocks.*=most': Remat(pattern='blocks.*', policy='most')"),
    ("remat:blocks.*=save_names", "go with policy='save_names'"),
])
def test_bad_remat_text_names_the_item(text, message):
    with pytest.raises(InvalidTactic) as info:
        parse_tactics(text)
    assert message in str(info.value)
