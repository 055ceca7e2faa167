"""The propagation engine's worklist (`worklist.Worklist`) asks only the ops a rewrite may have affected; the
result must be exactly that of asking every op at every step. Both engines run on every example and strategy
(and on each hand-written case of test/Transforms/slicer-propagate.mlir) and must give the same program."""

import sys
from pathlib import Path

import pytest
from mlir import ir

import slicer
from slicer.dialect import make_context
from slicer.propagation.engine import propagate_module

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples"
sys.path.insert(0, str(EXAMPLES / "strategies"))
import strategies  # noqa: E402

import example_modules  # noqa: E402

CASES = [(strategies.program_path(name), tactics, {"x": 2, "y": 2})
         for name, table in strategies.STRATEGIES.items() for tactics, _ in table.values()]
CASES += [(EXAMPLES / f"{name}.mlir", tactics, {"x": 2, "y": 4}) for name, tactics in (
    ("mha", "arg0.0=x"), ("mha", "arg0.0=x;arg1.1=y;arg2.1=y;arg3.1=y;arg4.0=y"), ("attention", "arg0.0=x"),
    ("layernorm", "arg0.1=y"), ("batch_matmul", "arg0.0=x;arg1.2=y"), ("reduction", "arg0.1=y"),
    ("reshape", "arg0.0=x"), ("transpose", "arg0.0=x"), ("softmax", "arg0.1=y"), ("mlp", "arg0.0=x;arg1.1=x"))]
CASES += [(ROOT / "test" / "Transforms" / "Inputs" / "rotation.mlir", "arg0.0=x", {"x": 2})]  # tile_rotation
HAND_WRITTEN = (ROOT / "test" / "Transforms" / "slicer-propagate.mlir").read_text().split("// -----")


def propagated(text: str, tactics: str | None, mesh, incremental: bool) -> str:
    with make_context():
        module = ir.Module.parse(text)
        if tactics is not None:
            slicer.apply_tactics(module, slicer.parse_tactics(tactics), mesh=mesh)
        propagate_module(module.operation, incremental=incremental)
        return str(module)


@pytest.mark.parametrize("path,tactics,mesh", CASES, ids=[f"{p.stem}-{t}" for p, t, _ in CASES])
def test_worklist_equals_asking_every_op(path, tactics, mesh):
    text = path.read_text()
    assert propagated(text, tactics, mesh, True) == propagated(text, tactics, mesh, False)


@pytest.mark.parametrize("index", range(len(HAND_WRITTEN)))
def test_worklist_on_each_law_case(index):
    text = HAND_WRITTEN[index]
    assert propagated(text, None, None, True) == propagated(text, None, None, False)


@pytest.mark.slow
def test_worklist_on_imported_models():
    """The torch-imported blocks (when torch is installed), both engines, the same program: every strategy of
    the GPT-2 block, Megatron on nn.TransformerEncoderLayer (the reference engine takes 2 s on its others)."""
    pytest.importorskip("torch")
    pytest.importorskip("torch_mlir")
    models = example_modules.load("torch/models.py", "torch_models")
    for name in ("gpt2_block", "encoder_layer"):
        model, inputs = models.MODELS[name]()
        text = slicer.from_torch(model, *inputs).text
        for strategy, (tactics, axis) in models.STRATEGIES[name].items():
            if name != "gpt2_block" and strategy != "megatron":
                continue
            assert propagated(text, tactics, {axis: 4}, True) == propagated(text, tactics, {axis: 4}, False), \
                (name, tactics)


@pytest.mark.parametrize("stage", [1, 3])
@pytest.mark.slow
def test_worklist_on_a_training_step(stage):
    """An AdamW step of the training MLP under ZeRO-1 and ZeRO-3: the optimizer's loops fuse one after another,
    and the bodies a fusion moves are not asked again (`fusion._fuse`, moved `settled`): the same program."""
    pytest.importorskip("torch")
    pytest.importorskip("torch_mlir")
    from slicer import strategies

    train = example_modules.load("torch/train_step.py", "train_step")
    model, loss_fn, batch = train.mlp()
    step = slicer.training_step(model, loss_fn, *batch, optimizer=slicer.AdamW(0.01))
    tactics = slicer.format_tactics(strategies.zero(step, "x", stage=stage))
    incremental = propagated(step.text, tactics, {"x": 2}, True)
    assert "fusion of sibling loops" in incremental
    assert incremental == propagated(step.text, tactics, {"x": 2}, False)


@pytest.mark.slow
def test_the_late_phase_asks_only_loops_with_an_earlier_sibling_to_fuse_with(monkeypatch):
    """An AdamW step of the training MLP under data + Megatron on 2x2 (loops over x around loops over y): the late
    phase asks the fusion law only about loops with an earlier loop in their block of the same range type,
    action, mesh and result type (`late_scan.LateScan`; the law refuses the others), and the program
    is still the one asking every op gives."""
    pytest.importorskip("torch")
    pytest.importorskip("torch_mlir")
    from slicer import strategies
    from slicer.propagation import worklist
    from slicer.propagation.fusion import may_fuse, sibling_facts

    def has_earlier_sibling(op) -> bool:
        earlier = []
        for other in op.block.operations:
            if other.operation == op:
                break
            earlier.append(other.operation)
        return any(o.name == op.name and may_fuse(sibling_facts(o), sibling_facts(op)) for o in earlier)

    asked, ask = [], worklist.ask_laws

    def recording(op, journal, laws):
        if laws is worklist.LATE_LAWS:
            asked.append(has_earlier_sibling(op))
        return ask(op, journal, laws)

    train = example_modules.load("torch/train_step.py", "train_step")
    model, loss_fn, batch = train.mlp()
    step = slicer.training_step(model, loss_fn, *batch, optimizer=slicer.AdamW(0.01))
    tactics = slicer.format_tactics(strategies.data_parallel(step, "x") +
                                    strategies.megatron(step, "y", column=["0.*"], row=["2.weight"]))
    mesh = {"x": 2, "y": 2}
    monkeypatch.setattr(worklist, "ask_laws", recording)
    incremental = propagated(step.text, tactics, mesh, True)
    monkeypatch.setattr(worklist, "ask_laws", ask)
    assert "fusion of sibling loops" in incremental
    assert asked and all(asked), f"{asked.count(False)} of {len(asked)} loops asked had no sibling to fuse with"
    assert incremental == propagated(step.text, tactics, mesh, False)
