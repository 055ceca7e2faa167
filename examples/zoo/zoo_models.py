"""A zoo of models written the way their authors write them, for `slicer.training_step`.

Each builder returns a `ZooCase`: the model, its loss function `loss_fn(model, *batch)`, an example batch and
the Megatron split of its parameters (`column` / `row` patterns for `slicer.strategies.megatron`, None for a
model without heads). The idioms are the point, not the sizes (all tiny, so a test trains them in seconds):

- `nanogpt`: Karpathy's nanoGPT: fused `c_attn` split into q, k, v, `F.scaled_dot_product_attention(...,
  is_causal=True)`, attention and residual dropout, tanh-gelu MLP, tied LM head, cross-entropy.
- `neox`: GPT-NeoX: fused `query_key_value` viewed per head, partial rotary (a slice of a slice of the last
  dim, `rotate_half`), parallel residual, explicit causal softmax attention.
- `vit`: timm's ViT: Conv2d patch embedding, class token, `qkv.reshape(B, N, 3, H, hd).permute(2, 0, 3, 1, 4)`
  then `unbind(0)`, SDPA, classification head.
- `resnet18`: torchvision's ResNet-18 layout (BasicBlocks 2-2-2-2, strided 3x3 convolutions, 1x1 downsample)
  with BatchNorm in train mode (running statistics updated by the step).
- `mixtral`: a Mixtral-style top-2 mixture of experts: router, softmax, `topk`, renormalised gates, `F.one_hot`
  dispatch, stacked SwiGLU expert weights through `einsum`, Switch's load-balancing auxiliary loss.
- `bert`: Hugging Face's BERT encoder: word, position and token-type embeddings, post-norm layers, a padding
  mask from `attention_mask`, dropout, classifier on the first token.
- `t5`: T5's encoder-decoder: RMS layer norm without bias, relative position buckets (log-spaced) read from a
  learned bias table, cross-attention, ReLU feed-forward, dropout, LM head on the decoder.
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F


def _example(relative: str, name: str):
    """The module of examples/<relative>, loaded by path (examples/ holds scripts, not packages)."""
    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parents[1] / relative)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


neox_block = _example("torch/neox.py", "neox_block")


@dataclass
class ZooCase:
    """A model, its loss function, an example batch and its Megatron split (None: no heads to split)."""

    name: str
    model: nn.Module
    loss_fn: Callable
    batch: tuple
    megatron: dict | None
    dropout: float = 0.0


def freeze_key_biases(model: nn.Module, pattern: str) -> nn.Module:
    """Make the biases that add to the attention keys (`pattern`: a substring of their names) untrained. A key
    bias has no gradient in exact arithmetic (softmax ignores what it adds to a whole row of scores): torch and
    Slicer both compute rounding noise there, in different orders, and AdamW divides that noise by its own
    magnitude, so the two updates differ by up to the learning rate. Frozen, they compare exactly."""
    for name, parameter in model.named_parameters():
        if pattern in name and name.endswith("bias"):
            parameter.requires_grad_(False)
    return model


def _lm_loss(model, idx, targets):
    logits = model(idx)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def _tokens(generator, batch, seq, vocab):
    tokens = torch.randint(0, vocab, (batch, seq + 1), generator=generator)
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


# ---------------------------------------------------------------------------------------------- nanoGPT
class NanoAttention(nn.Module):
    def __init__(self, d, n_head, dropout):
        super().__init__()
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)
        self.resid_dropout = nn.Dropout(dropout)
        self.n_head, self.d, self.dropout = n_head, d, dropout

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.d, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=None,
                                           dropout_p=self.dropout if self.training else 0, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class NanoMLP(nn.Module):
    def __init__(self, d, dropout):
        super().__init__()
        self.c_fc = nn.Linear(d, 4 * d)
        self.gelu = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * d, d)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class NanoBlock(nn.Module):
    def __init__(self, d, n_head, dropout):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d)
        self.attn = NanoAttention(d, n_head, dropout)
        self.ln_2 = nn.LayerNorm(d)
        self.mlp = NanoMLP(d, dropout)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class NanoGPT(nn.Module):
    def __init__(self, vocab=64, block_size=8, d=32, n_head=4, n_layer=2, dropout=0.0):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab, d), wpe=nn.Embedding(block_size, d), drop=nn.Dropout(dropout),
            h=nn.ModuleList([NanoBlock(d, n_head, dropout) for _ in range(n_layer)]), ln_f=nn.LayerNorm(d)))
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying, as nanoGPT

    def forward(self, idx):
        pos = torch.arange(0, idx.size(1), dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))


def nanogpt(seed=0, dropout=0.0, batch=4, seq=8, vocab=64):
    torch.manual_seed(seed)
    model = freeze_key_biases(NanoGPT(vocab=vocab, block_size=seq, dropout=dropout), "c_attn")
    return ZooCase("nanogpt", model, _lm_loss, _tokens(torch.Generator().manual_seed(seed), batch, seq, vocab),
                   {"column": ["transformer.h.*.attn.c_attn.*", "transformer.h.*.mlp.c_fc.*"],
                    "row": ["transformer.h.*.attn.c_proj.weight", "transformer.h.*.mlp.c_proj.weight"]}, dropout)


# ---------------------------------------------------------------------------------------------- GPT-NeoX
class NeoX(nn.Module):
    """Embedding, GPT-NeoX blocks (examples/torch/neox.py: the fused per-head QKV cut by slicing, partial rotary,
    parallel residual), final norm and LM head."""

    def __init__(self, vocab=64, seq=8, d=32, n_head=4, n_layer=2):
        super().__init__()
        self.embed_in = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList([neox_block.Block(d, n_head, seq) for _ in range(n_layer)])
        self.final_layer_norm = nn.LayerNorm(d)
        self.embed_out = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        x = self.embed_in(idx)
        for layer in self.layers:
            x = layer(x)
        return self.embed_out(self.final_layer_norm(x))


def neox(seed=0, batch=4, seq=8, vocab=64):
    torch.manual_seed(seed)
    return ZooCase("neox", freeze_key_biases(NeoX(vocab=vocab, seq=seq), "query_key_value"), _lm_loss,
                   _tokens(torch.Generator().manual_seed(seed), batch, seq, vocab),
                   {kind: [f"layers.*.{p}" for p in patterns] for kind, patterns in neox_block.MEGATRON.items()})


# ---------------------------------------------------------------------------------------------- ViT (timm)
class TimmAttention(nn.Module):
    def __init__(self, d, n_head):
        super().__init__()
        self.num_heads, self.head_dim = n_head, d // n_head
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        x = F.scaled_dot_product_attention(q, k, v)
        return self.proj(x.transpose(1, 2).reshape(B, N, C))


class TimmBlock(nn.Module):
    def __init__(self, d, n_head):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = TimmAttention(d, n_head)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class ViT(nn.Module):
    def __init__(self, image=16, patch=4, d=32, n_head=4, depth=2, classes=10):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, d, patch, stride=patch)
        tokens = (image // patch) ** 2
        self.cls_token = nn.Parameter(torch.randn(1, 1, d) * 0.02)
        self.pos_embed = nn.Parameter(torch.randn(1, tokens + 1, d) * 0.02)
        self.blocks = nn.ModuleList([TimmBlock(d, n_head) for _ in range(depth)])
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1) + self.pos_embed
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x)[:, 0])


def _classify(model, images, labels):
    return F.cross_entropy(model(images), labels)


def vit(seed=0, batch=4):
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    return ZooCase("vit", freeze_key_biases(ViT(), "qkv"), _classify, (torch.randn(batch, 3, 16, 16, generator=g),
                                             torch.randint(0, 10, (batch,), generator=g)),
                   {"column": ["blocks.*.attn.qkv.*", "blocks.*.mlp.0.*"],
                    "row": ["blocks.*.attn.proj.weight", "blocks.*.mlp.2.weight"]})


# ---------------------------------------------------------------------------------------------- ResNet-18
class BasicBlock(nn.Module):
    def __init__(self, inp, out, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(inp, out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(out)
        self.conv2 = nn.Conv2d(out, out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(out)
        self.downsample = None
        if stride != 1 or inp != out:
            self.downsample = nn.Sequential(nn.Conv2d(inp, out, 1, stride, bias=False), nn.BatchNorm2d(out))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + identity)


class ResNet18(nn.Module):
    def __init__(self, widths=(8, 16, 32, 64), classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, widths[0], 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        layers, inp = [], widths[0]
        for i, w in enumerate(widths):
            layers.append(nn.Sequential(BasicBlock(inp, w, 1 if i == 0 else 2), BasicBlock(w, w, 1)))
            inp = w
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.fc = nn.Linear(inp, classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def resnet18(seed=0, batch=4):
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    return ZooCase("resnet18", ResNet18().train(), _classify,
                   (torch.randn(batch, 3, 16, 16, generator=g), torch.randint(0, 10, (batch,), generator=g)), None)


# ---------------------------------------------------------------------------------------------- Mixtral MoE
class MoE(nn.Module):
    """Top-2 routing, stacked SwiGLU experts ([E, D, F]), dispatch and combine with one-hot masks."""

    def __init__(self, d, hidden, experts=4, top_k=2):
        super().__init__()
        self.gate = nn.Linear(d, experts, bias=False)
        self.w1 = nn.Parameter(torch.randn(experts, d, hidden) / math.sqrt(d))
        self.w3 = nn.Parameter(torch.randn(experts, d, hidden) / math.sqrt(d))
        self.w2 = nn.Parameter(torch.randn(experts, hidden, d) / math.sqrt(hidden))
        self.experts, self.top_k = experts, top_k

    def forward(self, x):
        B, T, D = x.shape
        tokens = x.reshape(-1, D)
        probs = F.softmax(self.gate(tokens), dim=-1)
        weights, selected = torch.topk(probs, self.top_k, dim=-1)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        dispatch = F.one_hot(selected, self.experts).to(x.dtype)        # [N, k, E]
        combine = (dispatch * weights.unsqueeze(-1)).sum(1)             # [N, E]
        h = F.silu(torch.einsum("nd,edh->enh", tokens, self.w1)) * torch.einsum("nd,edh->enh", tokens, self.w3)
        out = torch.einsum("enh,ehd->end", h, self.w2)                  # every expert on every token
        y = torch.einsum("end,ne->nd", out, combine)
        # Switch Transformer's load-balancing loss: fraction of tokens routed to each expert x mean gate
        fraction = dispatch.sum(1).mean(0)
        self.aux_loss = self.experts * (fraction * probs.mean(0)).sum()
        return y.reshape(B, T, D)


class MixtralBlock(nn.Module):
    def __init__(self, d, n_head):
        super().__init__()
        self.ln1, self.ln2 = nn.RMSNorm(d), nn.RMSNorm(d)
        self.q, self.k, self.v, self.o = (nn.Linear(d, d, bias=False) for _ in range(4))
        self.moe = MoE(d, 2 * d)
        self.n_head = n_head

    def forward(self, x):
        B, T, D = x.shape
        h = self.ln1(x)
        q, k, v = (p(h).view(B, T, self.n_head, -1).transpose(1, 2) for p in (self.q, self.k, self.v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(y.transpose(1, 2).reshape(B, T, D))
        return x + self.moe(self.ln2(x))


class Mixtral(nn.Module):
    def __init__(self, vocab=64, d=32, n_head=4, n_layer=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList([MixtralBlock(d, n_head) for _ in range(n_layer)])
        self.norm = nn.RMSNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        x = self.embed(idx)
        for layer in self.layers:
            x = layer(x)
        return self.lm_head(self.norm(x))


def _moe_loss(model, idx, targets):
    loss = _lm_loss(model, idx, targets)
    return loss + 0.01 * sum(layer.moe.aux_loss for layer in model.layers)


def mixtral(seed=0, batch=4, seq=8, vocab=64):
    torch.manual_seed(seed)
    return ZooCase("mixtral", Mixtral(vocab=vocab), _moe_loss,
                   _tokens(torch.Generator().manual_seed(seed), batch, seq, vocab),
                   {"column": ["layers.*.q.*", "layers.*.k.*", "layers.*.v.*"], "row": ["layers.*.o.weight"]})


# ---------------------------------------------------------------------------------------------- BERT
class BertLayer(nn.Module):
    def __init__(self, d, n_head, dropout):
        super().__init__()
        self.query, self.key, self.value = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.attention_output = nn.Linear(d, d)
        self.attention_norm = nn.LayerNorm(d, eps=1e-12)
        self.intermediate = nn.Linear(d, 4 * d)
        self.output = nn.Linear(4 * d, d)
        self.output_norm = nn.LayerNorm(d, eps=1e-12)
        self.dropout = nn.Dropout(dropout)
        self.n_head = n_head

    def forward(self, x, extended_mask):
        B, S, D = x.shape

        def heads(t):
            return t.view(B, S, self.n_head, D // self.n_head).permute(0, 2, 1, 3)

        q, k, v = heads(self.query(x)), heads(self.key(x)), heads(self.value(x))
        scores = q @ k.transpose(-1, -2) / math.sqrt(D // self.n_head) + extended_mask
        probs = self.dropout(scores.softmax(-1))
        context = (probs @ v).permute(0, 2, 1, 3).reshape(B, S, D)
        x = self.attention_norm(x + self.dropout(self.attention_output(context)))
        return self.output_norm(x + self.dropout(self.output(F.gelu(self.intermediate(x)))))


class Bert(nn.Module):
    def __init__(self, vocab=64, seq=8, d=32, n_head=4, n_layer=2, classes=3, dropout=0.0):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, d)
        self.position_embeddings = nn.Embedding(seq, d)
        self.token_type_embeddings = nn.Embedding(2, d)
        self.embeddings_norm = nn.LayerNorm(d, eps=1e-12)
        self.layers = nn.ModuleList([BertLayer(d, n_head, dropout) for _ in range(n_layer)])
        self.classifier = nn.Linear(d, classes)
        self.dropout = nn.Dropout(dropout)

    def forward(self, input_ids, attention_mask, token_type_ids):
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.word_embeddings(input_ids) + self.position_embeddings(positions)
        x = self.dropout(self.embeddings_norm(x + self.token_type_embeddings(token_type_ids)))
        extended = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        for layer in self.layers:
            x = layer(x, extended)
        return self.classifier(x[:, 0])


def _bert_loss(model, input_ids, attention_mask, token_type_ids, labels):
    return F.cross_entropy(model(input_ids, attention_mask, token_type_ids), labels)


def bert(seed=0, dropout=0.0, batch=4, seq=8, vocab=64):
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(3, seq + 1, (batch,), generator=g)
    mask = (torch.arange(seq)[None, :] < lengths[:, None]).long()
    ids = torch.randint(0, vocab, (batch, seq), generator=g) * mask
    types = (torch.arange(seq)[None, :] >= (lengths[:, None] // 2)).long() * mask
    return ZooCase("bert", freeze_key_biases(Bert(vocab=vocab, seq=seq, dropout=dropout), ".key."), _bert_loss,
                   (ids, mask, types, torch.randint(0, 3, (batch,), generator=g)),
                   {"column": ["layers.*.query.*", "layers.*.key.*", "layers.*.value.*", "layers.*.intermediate.*"],
                    "row": ["layers.*.attention_output.weight", "layers.*.output.weight"]}, dropout)


# ---------------------------------------------------------------------------------------------- T5
class T5LayerNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.variance_epsilon = eps

    def forward(self, x):
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + self.variance_epsilon))


def relative_position_bucket(relative_position, bidirectional, num_buckets=32, max_distance=128):
    """T5's bucketing (transformers' `T5Attention._relative_position_bucket`)."""
    relative_buckets = 0
    if bidirectional:
        num_buckets //= 2
        relative_buckets += (relative_position > 0).to(torch.long) * num_buckets
        relative_position = torch.abs(relative_position)
    else:
        relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact
    if_large = max_exact + (torch.log(relative_position.float() / max_exact) / math.log(max_distance / max_exact)
                            * (num_buckets - max_exact)).to(torch.long)
    if_large = torch.min(if_large, torch.full_like(if_large, num_buckets - 1))
    return relative_buckets + torch.where(is_small, relative_position, if_large)


class T5Attention(nn.Module):
    def __init__(self, d, n_head, relative_bias, bidirectional, dropout):
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(d, d, bias=False) for _ in range(4))
        self.n_head, self.bidirectional = n_head, bidirectional
        self.relative_attention_bias = nn.Embedding(32, n_head) if relative_bias else None
        self.dropout = dropout

    def position_bias(self, q_len, k_len):
        context = torch.arange(q_len, dtype=torch.long)[:, None]
        memory = torch.arange(k_len, dtype=torch.long)[None, :]
        buckets = relative_position_bucket(memory - context, self.bidirectional)
        return self.relative_attention_bias(buckets).permute(2, 0, 1).unsqueeze(0)

    def forward(self, x, kv=None, bias=None, mask=None):
        B, T, D = x.shape
        kv = x if kv is None else kv

        def heads(t):
            return t.view(B, -1, self.n_head, D // self.n_head).transpose(1, 2)

        q, k, v = heads(self.q(x)), heads(self.k(kv)), heads(self.v(kv))
        scores = q @ k.transpose(-1, -2)  # T5 does not scale
        if bias is None and self.relative_attention_bias is not None:
            bias = self.position_bias(T, kv.shape[1])
        if bias is not None:
            scores = scores + bias
        if mask is not None:
            scores = scores + mask
        probs = F.dropout(scores.softmax(-1), self.dropout, self.training)
        return self.o((probs @ v).transpose(1, 2).reshape(B, T, D)), bias


class T5Layer(nn.Module):
    def __init__(self, d, n_head, relative_bias, decoder, dropout):
        super().__init__()
        self.self_norm = T5LayerNorm(d)
        self.self_attention = T5Attention(d, n_head, relative_bias, not decoder, dropout)
        self.cross_norm = T5LayerNorm(d) if decoder else None
        self.cross_attention = T5Attention(d, n_head, False, True, dropout) if decoder else None
        self.ff_norm = T5LayerNorm(d)
        self.wi, self.wo = nn.Linear(d, 4 * d, bias=False), nn.Linear(4 * d, d, bias=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, bias=None, mask=None, memory=None):
        attended, bias = self.self_attention(self.self_norm(x), bias=bias, mask=mask)
        x = x + self.dropout(attended)
        if self.cross_attention is not None:
            x = x + self.dropout(self.cross_attention(self.cross_norm(x), kv=memory)[0])
        return x + self.dropout(self.wo(self.dropout(F.relu(self.wi(self.ff_norm(x)))))), bias


class T5(nn.Module):
    def __init__(self, vocab=64, d=32, n_head=4, n_layer=2, dropout=0.0):
        super().__init__()
        self.shared = nn.Embedding(vocab, d)
        self.encoder = nn.ModuleList([T5Layer(d, n_head, i == 0, False, dropout) for i in range(n_layer)])
        self.decoder = nn.ModuleList([T5Layer(d, n_head, i == 0, True, dropout) for i in range(n_layer)])
        self.encoder_norm, self.decoder_norm = T5LayerNorm(d), T5LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)

    def forward(self, input_ids, decoder_input_ids):
        x, bias = self.shared(input_ids), None
        for layer in self.encoder:
            x, bias = layer(x, bias)
        memory = self.encoder_norm(x)
        T = decoder_input_ids.shape[1]
        causal = torch.triu(torch.full((T, T), torch.finfo(memory.dtype).min, dtype=memory.dtype), diagonal=1)
        y, bias = self.shared(decoder_input_ids), None
        for layer in self.decoder:
            y, bias = layer(y, bias, causal, memory)
        return self.lm_head(self.decoder_norm(y) * (y.shape[-1] ** -0.5))


def _t5_loss(model, input_ids, decoder_input_ids, labels):
    logits = model(input_ids, decoder_input_ids)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


def t5(seed=0, dropout=0.0, batch=4, seq=8, vocab=64):
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    source = torch.randint(0, vocab, (batch, seq), generator=g)
    target = torch.randint(0, vocab, (batch, seq + 1), generator=g)
    parts = ["encoder", "decoder"]
    return ZooCase("t5", T5(vocab=vocab, dropout=dropout), _t5_loss,
                   (source, target[:, :-1].contiguous(), target[:, 1:].contiguous()),
                   {"column": [f"*.{a}.{w}.*" for a in ("self_attention", "cross_attention") for w in "qkv"]
                    + [f"{p}.*.wi.*" for p in parts],
                    "row": [f"*.{a}.o.weight" for a in ("self_attention", "cross_attention")]
                    + [f"{p}.*.wo.weight" for p in parts]}, dropout)


ZOO = {"nanogpt": nanogpt, "neox": neox, "vit": vit, "resnet18": resnet18, "mixtral": mixtral, "bert": bert,
       "t5": t5}
"""The zoo's builders by name."""
