"""What every contender of `training.py` shares: the sizes, the model and batches, the optimizer settings, the
step-time record and the peak memory of a process.

Every contender trains the GPT of examples/training/model.py built by `build_model` (torch's generator seeded
with 0, so every process gets the same initial parameters) on the batches of `batches` (the example's task,
its generator seeded with 1), `warmup + steps` steps of AdamW with `ADAMW`; the first `warmup` steps are not
timed. A worker writes its `record` as JSON; `training.py` compares them.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "training"
ZOO = ROOT / "examples" / "zoo"

ADAMW = {"lr": 3e-4, "betas": (0.9, 0.99), "eps": 1e-8, "weight_decay": 0.01}
"""The optimizer of every contender (torch.optim.AdamW, slicer.AdamW, the JAX port's update)."""

OPENBLAS_VARIABLES = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
"""Set on some machines for old OpenBLAS builds; they slow a current one, so the torch workers run without
them (the machine notes: unset both together, in the benchmark's command only)."""


@dataclass(frozen=True)
class Sizes:
    """The model, batch and schedule: `steps` timed steps after `warmup` untimed ones."""

    n_layer: int = 4
    d_model: int = 512
    n_head: int = 8
    seq: int = 256
    batch: int = 8
    vocab: int = 512
    warmup: int = 2
    steps: int = 10
    model: str = "example"
    precision: str = "f32"  # or "bf16": mixed precision (see training.py)

    @property
    def tokens(self) -> int:
        """Tokens per step (the whole batch, over every process)."""
        return self.batch * self.seq

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Sizes:
        return cls(**json.loads(text))


SMALL = Sizes(n_layer=1, d_model=32, n_head=4, seq=16, batch=4, vocab=16, warmup=1, steps=3)
"""The smoke test's sizes (`training.py --small`)."""

GPT2_SMALL = Sizes(n_layer=12, d_model=768, n_head=12, seq=128, batch=4, vocab=50257, warmup=2, steps=5,
                   model="gpt2-small")
"""GPT-2 small (124M parameters): examples/zoo's nanoGPT (fused c_attn, SDPA, tanh-gelu MLP, the LM head tied
to the token embedding) on random tokens, next-token cross-entropy over every position."""

MODELS = {"example": Sizes(), "gpt2-small": GPT2_SMALL}
"""The models a benchmark can train (`--model`), each with its default sizes."""


def example_module():
    """examples/training/model.py, imported (it needs torch)."""
    if str(EXAMPLE) not in sys.path:
        sys.path.insert(0, str(EXAMPLE))
    import model

    return model


def zoo_module():
    """examples/zoo/zoo_models.py, imported (it needs torch)."""
    if str(ZOO) not in sys.path:
        sys.path.insert(0, str(ZOO))
    import zoo_models

    return zoo_models


def build_model(sizes: Sizes):
    """The GPT with the initial parameters every contender starts from."""
    import torch

    torch.manual_seed(0)
    if sizes.model == "gpt2-small":
        return zoo_module().NanoGPT(vocab=sizes.vocab, block_size=sizes.seq, d=sizes.d_model, n_head=sizes.n_head,
                                    n_layer=sizes.n_layer)
    return example_module().GPT(vocab=sizes.vocab, seq=sizes.seq, d_model=sizes.d_model, n_head=sizes.n_head,
                                n_layer=sizes.n_layer)


def loss_function(sizes: Sizes):
    """The loss `loss_fn(model, idx, targets)` of the model `sizes` name."""
    return zoo_module()._lm_loss if sizes.model == "gpt2-small" else example_module().loss_fn


def autocast(sizes: Sizes):
    """The context torch's contenders run a step's forward and loss in: `torch.autocast` to bf16 under
    `--precision bf16` (what a torch user trains with on a CPU with bf16 units), else nothing."""
    import contextlib

    import torch

    if sizes.precision == "bf16":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def megatron_split(sizes: Sizes) -> dict:
    """The Megatron split (column / row parameter patterns) of the model `sizes` name."""
    if sizes.model == "gpt2-small":  # the tied embedding / LM head split by vocabulary too, as Megatron-LM's
        return {"column": ["transformer.h.*.attn.c_attn.*", "transformer.h.*.mlp.c_fc.*", "transformer.wte.weight"],
                "row": ["transformer.h.*.attn.c_proj.weight", "transformer.h.*.mlp.c_proj.weight"]}
    return example_module().MEGATRON


def blocks(model) -> list:
    """The model's transformer blocks (FSDP2 shards each on its own)."""
    return list(model.transformer.h) if hasattr(model, "transformer") else list(model.blocks)


def batches(sizes: Sizes):
    """The `warmup + steps` global batches (idx, targets), as torch int64 tensors, in order: the example's task,
    or random tokens and their successors for GPT-2 small."""
    import torch

    generator = torch.Generator().manual_seed(1)
    count = sizes.warmup + sizes.steps
    if sizes.model == "gpt2-small":
        tokens = [torch.randint(0, sizes.vocab, (sizes.batch, sizes.seq + 1), generator=generator)
                  for _ in range(count)]
        return [(t[:, :-1].contiguous(), t[:, 1:].contiguous()) for t in tokens]
    make = example_module().batch
    return [make(generator, sizes.batch, sizes.seq, sizes.vocab) for _ in range(count)]


def status_mib(pid: int | str, field: str) -> float:
    """A memory field of /proc/<pid>/status (kB there), MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/{pid}/status")


def peak_rss_mib(pid: int | str = "self") -> float:
    """The peak resident set of a process (`VmHWM` of /proc/<pid>/status), MiB. It counts the pages of shared
    memory the process touched too (an MPI shared-memory window of a Slicer rank: `RssShmem` now)."""
    return status_mib(pid, "VmHWM")


def record(name: str, sizes: Sizes, times: list[float], losses: list[float], peak_mib: list[float],
           **extra) -> dict:
    """A contender's result: the timed steps' wall times (seconds, after warm-up), the losses of every step
    (warm-up included, so the first is step 1's), the peak memory of each of its processes (VmHWM, MiB)."""
    timed = times[sizes.warmup:] if len(times) == sizes.warmup + sizes.steps else times
    median = statistics.median(timed)
    return {"name": name, "times": timed, "median_s": median, "min_s": min(timed),
            "tokens_per_s": sizes.tokens / median, "losses": losses, "peak_rss_mib": peak_mib,
            "memory": "VmHWM", **extra}


def write(path: str, result: dict) -> None:
    Path(path).write_text(json.dumps(result))


def torch_environment() -> dict[str, str]:
    """The environment of a torch worker: this one without the OpenBLAS overrides."""
    return {k: v for k, v in os.environ.items() if k not in OPENBLAS_VARIABLES}
