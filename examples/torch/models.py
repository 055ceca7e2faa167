"""The PyTorch models of examples/torch (a GPT-2 block, torch's nn.TransformerEncoderLayer, a ViT, a BERT
encoder), their partitioning strategies (tactics by parameter name) and their inputs: shared by `partition.py`, the
tests (test/unit/frontends, test/mpi/test_torch_models.py) and benchmarks/import_compile.py.

Mesh axes: x for data, y for the model. Strategies, each a schedule of tactics in order:
- megatron: attention heads and MLP hidden units over y (Megatron-LM: the output projection's input dim and
  the second linear's input dim are split, the first linear's output dim with its bias). Everything before is
  pulled in by propagation: Q, K and V of the fused QKV projection are computed for the device's heads only
  (the fused weight stays whole), and exactly two all_reduces remain in the forward pass.
- sequence: the input's sequence dim over y. Every token-wise op stays local; attention needs every key and
  value, gathered once each (two all_gathers).
- data: the input's batch dim over x. No collective.
A model registers its factory in MODELS, its strategies in STRATEGIES and, where its list differs from the
strategy's (two blocks: two all_reduces each), its collectives under (model, strategy) in COLLECTIVES;
test/mpi/test_torch_models.py runs every model under each of its strategies on 2 MPI ranks against torch.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bert
import vit
from cnn import SmallCNN, randomized
from gpt2_block import GPT2Block
from llama import MEGATRON as LLAMA_MEGATRON
from llama import llama_block
from moe import MoE

BATCH, SEQ, D_MODEL, HEADS = 4, 8, 32, 4


def gpt2_block(seed: int = 0):
    """(model, example inputs): a GPT-2 block (causal mask buffer, tanh-gelu MLP of 4 * D)."""
    torch.manual_seed(seed)
    model = GPT2Block(D_MODEL, HEADS, max_len=SEQ).eval()
    return model, (torch.randn(BATCH, SEQ, D_MODEL),)


def encoder_layer(seed: int = 0):
    """(model, example inputs): torch's own nn.TransformerEncoderLayer (post-norm, exact gelu, feed-forward of
    2 * D), batch first, called with a boolean causal mask as its second input."""
    torch.manual_seed(seed)
    model = torch.nn.TransformerEncoderLayer(D_MODEL, HEADS, dim_feedforward=2 * D_MODEL, dropout=0.0,
                                             activation="gelu", batch_first=True).eval()
    mask = torch.triu(torch.ones(SEQ, SEQ, dtype=torch.bool), diagonal=1)
    return model, (torch.randn(BATCH, SEQ, D_MODEL), mask)


def moe(seed: int = 0, scatter: bool = False):
    """(model, example inputs): a Mixtral-style MoE layer (4 SwiGLU experts, top-2 router); `scatter=True`
    writes the gates with torch.topk and torch.scatter (imported as one-hot forms), else with a mask."""
    torch.manual_seed(seed)
    return MoE(D_MODEL, 2 * D_MODEL, experts=4, top_k=2, scatter=scatter).eval(), (torch.randn(BATCH, SEQ, D_MODEL),)


def cnn(seed: int = 0):
    """(model, example inputs): a small CNN with BatchNorm in eval mode, on [B, 3, 8, 8] images."""
    torch.manual_seed(seed)
    return randomized(SmallCNN(), seed), (torch.randn(BATCH, 3, 8, 8),)


MODELS = {"gpt2_block": gpt2_block, "encoder_layer": encoder_layer, "llama_block": llama_block}
MODELS.update(vit=vit.tiny_vit, bert=bert.tiny_bert)  # gpt.py's tiny GPT has its own tests (test/mpi/test_gpt.py)
MODELS.update(moe=moe, cnn=cnn)  # the MoE with its mask router (the scatter one: test_torch_lowering.py)

# model -> strategy -> (tactics in order, the mesh axis it uses)
STRATEGIES = {
    "gpt2_block": {
        "megatron": ("attn.c_proj.weight.1=y;mlp.c_fc.weight.0=y;mlp.c_fc.bias.0=y;mlp.c_proj.weight.1=y", "y"),
        "sequence": ("x.1=y", "y"),
        "data": ("x.0=x", "x"),
    },
    "encoder_layer": {
        "megatron": ("self_attn.out_proj.weight.1=y;linear1.weight.0=y;linear1.bias.0=y;linear2.weight.1=y", "y"),
        "sequence": ("src.1=y", "y"),
        "data": ("src.0=x", "x"),
    },
    # ViT: 17 tokens (16 patches and the class token) do not divide y, so no sequence parallelism.
    "vit": {"megatron": (vit.megatron(), "y"), "data": ("images.0=x", "x")},
    # BERT: sequence parallelism is degraded (the position embedding's arange and the padding mask along the keys
    # keep the embeddings and softmax whole: DegradedStrategy warnings), so it is not listed.
    "bert": {"megatron": (bert.megatron(), "y"), "data": ("input_ids.0=x;token_type_ids.0=x;attention_mask.0=x", "x")},
    "llama_block": {"megatron": (LLAMA_MEGATRON, "y"), "data": ("x.0=x", "x")},  # no sequence: see llama.py
    # Partitioned by their batch only: data parallelism, no collective (BatchNorm's reciprocal asserts are
    # dropped at import, so nothing reads the activations whole).
    "moe": {"data": ("x.0=x", "x")},
    "cnn": {"data": ("x.0=x", "x")},
}

# The collectives each strategy leaves in the forward pass (op names, in order).
COLLECTIVES = {
    "megatron": ["shard.all_reduce", "shard.all_reduce"],
    "sequence": ["shard.all_gather", "shard.all_gather"],
    "data": [],
    # (model, strategy) for models whose list differs: two all_reduces per block of two-block models
    ("vit", "megatron"): ["shard.all_reduce"] * 4, ("bert", "megatron"): ["shard.all_reduce"] * 4,
}


def collectives(model: str, strategy: str) -> list[str]:
    """The collectives `strategy` leaves in `model`'s forward pass (op names, in order)."""
    return COLLECTIVES.get((model, strategy), COLLECTIVES[strategy])


def eager(model, inputs) -> torch.Tensor:
    """The reference: the model run by PyTorch itself, in float32."""
    with torch.no_grad():
        return model(*inputs).numpy()


def relative_error(got, want) -> float:
    """|got - want| / |want| (Frobenius norms)."""
    import numpy as np

    return float(np.linalg.norm(np.asarray(got, np.float64) - want) / np.linalg.norm(want))
