"""A BERT-style encoder in plain PyTorch, as the BERT paper and Hugging Face's BertModel write it: word,
position and token-type embeddings summed and layer-normed, post-norm encoder layers (self-attention with
separate query, key and value projections, masked where the batch is padding; a gelu feed-forward; residuals),
returning the last hidden states.

    h = norm(word(ids) + position(arange(S)) + token_type(types));   h = layer_i(h, mask) for each i

The padding mask is an input: `attention_mask` is [B, S] float32, 1 for a real token and 0 for padding; the
scores of padded keys get -10000 added (BERT's own additive mask), so no query attends to padding.

Parameters (names as tactics use them): embeddings.word.weight ([V, D]), embeddings.position.weight ([S, D]),
embeddings.token_type.weight ([2, D]), embeddings.norm.weight/bias, layers.<i>.attn.query/key/value.weight
([D, D]) and .bias, layers.<i>.attn.out.weight ([D, D]) and .bias, layers.<i>.norm1.weight/bias,
layers.<i>.ffn.fc1.weight ([F, D]) and .bias, layers.<i>.ffn.fc2.weight ([D, F]) and .bias,
layers.<i>.norm2.weight/bias. Inputs: `input_ids` and `token_type_ids` [B, S] int64, `attention_mask` [B, S].
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F


class Embeddings(nn.Module):
    def __init__(self, vocab: int, max_len: int, d_model: int):
        super().__init__()
        self.word = nn.Embedding(vocab, d_model)
        self.position = nn.Embedding(max_len, d_model)
        self.token_type = nn.Embedding(2, d_model)
        self.norm = nn.LayerNorm(d_model, eps=1e-12)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        return self.norm(self.word(input_ids) + self.position(positions) + self.token_type(token_type_ids))


class SelfAttention(nn.Module):
    def __init__(self, d_model: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.query = nn.Linear(d_model, d_model)
        self.key = nn.Linear(d_model, d_model)
        self.value = nn.Linear(d_model, d_model)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor, additive_mask: torch.Tensor) -> torch.Tensor:
        batch, seq, d_model = x.shape
        heads = lambda t: t.view(batch, seq, self.n_head, d_model // self.n_head).transpose(1, 2)  # noqa: E731
        q, k, v = heads(self.query(x)), heads(self.key(x)), heads(self.value(x))
        scores = q @ k.transpose(-2, -1) / math.sqrt(d_model // self.n_head) + additive_mask
        out = F.softmax(scores, dim=-1) @ v
        return self.out(out.transpose(1, 2).reshape(batch, seq, d_model))


class FeedForward(nn.Module):
    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.fc1 = nn.Linear(d_model, d_ff)
        self.fc2 = nn.Linear(d_ff, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class Layer(nn.Module):
    def __init__(self, d_model: int, n_head: int, d_ff: int):
        super().__init__()
        self.attn = SelfAttention(d_model, n_head)
        self.norm1 = nn.LayerNorm(d_model, eps=1e-12)
        self.ffn = FeedForward(d_model, d_ff)
        self.norm2 = nn.LayerNorm(d_model, eps=1e-12)

    def forward(self, x: torch.Tensor, additive_mask: torch.Tensor) -> torch.Tensor:
        x = self.norm1(x + self.attn(x, additive_mask))
        return self.norm2(x + self.ffn(x))


class Bert(nn.Module):
    def __init__(self, vocab: int = 64, max_len: int = 8, d_model: int = 32, n_head: int = 4, n_layer: int = 2,
                 d_ff: int = 64):
        super().__init__()
        self.embeddings = Embeddings(vocab, max_len, d_model)
        self.layers = nn.ModuleList(Layer(d_model, n_head, d_ff) for _ in range(n_layer))

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor,
                attention_mask: torch.Tensor) -> torch.Tensor:
        additive_mask = (1.0 - attention_mask[:, None, None, :]) * -10000.0  # [B, 1, 1, S]
        h = self.embeddings(input_ids, token_type_ids)
        for layer in self.layers:
            h = layer(h, additive_mask)
        return h


def tiny_bert(n_layer: int = 2, *, batch: int = 4, seq: int = 8, vocab: int = 64, d_model: int = 32,
              n_head: int = 4, seed: int = 0):
    """(model, example inputs): a small BERT in eval mode, random token ids, two segments (types 0 then 1) and a
    padding mask where sequence b has its last b tokens padded."""
    torch.manual_seed(seed)
    model = Bert(vocab, seq, d_model, n_head, n_layer, 2 * d_model).eval()
    input_ids = torch.randint(0, vocab, (batch, seq))
    token_type_ids = (torch.arange(seq) >= seq // 2).long().expand(batch, seq).contiguous()
    attention_mask = (torch.arange(seq)[None, :] < seq - torch.arange(batch)[:, None]).float()
    return model, (input_ids, token_type_ids, attention_mask)


def megatron(n_layer: int = 2) -> str:
    """Megatron over y: every layer's heads (the output projection's input dim) and feed-forward units."""
    return ";".join(f"layers.{i}.{t}" for i in range(n_layer)
                    for t in ("attn.out.weight.1=y", "ffn.fc1.weight.0=y", "ffn.fc1.bias.0=y", "ffn.fc2.weight.1=y"))
