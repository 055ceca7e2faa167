"""The slicing fuzzer (test/fuzz/slicing.py): chains of slices, splits, unbinds and concats of a projection,
imported with the cleanup on (forward and training step), data parallel on 2 simulated devices, equal to
torch eager. A few hypothesis draws here (each imports and compiles two programs: seconds each); the fuzzer's
command line draws many more (`python test/fuzz/run.py --slicing-share 1 --training-share 0`)."""

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("torch_mlir")

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzz.execute import FAILURES
from fuzz.slicing import SlicingCase, draw_slicing_case, execute_slicing, generate_slicing_case
from fuzz.source import HypothesisSource

# GPT-NeoX's partial rotary as a chain: q of a per-head fused projection, its rotated part, rotate_half of it;
# then timm's unbind of heads moved to the front, and pieces shuffled back together.
ROTARY = SlicingCase(features=24, chain=[{"op": "split", "dim": -1, "size": 8, "keep": 0},
                                         {"op": "slice", "dim": -1, "start": 0, "stop": 4, "step": 1},
                                         {"op": "rotate_half"}])
HEADS = SlicingCase(features=24, chain=[{"op": "chunk", "dim": -1, "chunks": 3, "keep": 1},
                                        {"op": "shuffle", "size": 2, "order": [3, 1, 0, 2], "negate": 2},
                                        {"op": "narrow", "dim": 1, "start": 2, "length": 2}])
# An unbind whose other pieces are outputs: the training step's graph has an in-place add (functionalized by a
# second trace), and the decomposition of unbind's backward leaves prims.squeeze, which functionalization
# refuses ("custom (non-ATen) operator whose output has alias annotations"): a FrontendError on import.
UNBIND = SlicingCase(features=24, chain=[{"op": "unbind", "k": 3, "front": False, "keep": 1}])


def test_cases_replay_from_their_seed_and_json():
    for seed in range(50):
        case = generate_slicing_case(seed)
        assert case == generate_slicing_case(seed)
        assert SlicingCase.from_json(json.loads(json.dumps(case.to_json()))) == case
        assert 1 <= len(case.chain) <= 3


@pytest.mark.parametrize("case", [ROTARY, HEADS], ids=["rotary", "heads"])
@pytest.mark.slow
def test_slices_of_slices_import_and_train_equal_to_torch(case):
    outcome = execute_slicing(case)
    assert outcome.kind == "ok", outcome.message


@pytest.mark.slow
def test_an_unbind_with_its_other_pieces_as_outputs_trains():
    """unbind's backward squeezes (`aten.squeeze.dims`), which torch-mlir's table made `prims.squeeze`, refused by
    the functionalizing retrace; `stateful.py` traces it as a reshape."""
    outcome = execute_slicing(UNBIND)
    assert outcome.kind == "ok", outcome.message


@settings(max_examples=3, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(st.data())
@pytest.mark.slow
def test_drawn_slicing_chains_do_not_fail(data):
    case = draw_slicing_case(HypothesisSource(data), max_steps=3)
    outcome = execute_slicing(case)
    assert outcome.kind not in FAILURES, (case.reproducer(), outcome.message)
