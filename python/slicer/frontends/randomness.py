"""Random numbers inside a training step: dropout's masks from a counter-based generator, computed in the program.

A training step is a function of its arguments, partitioned across devices: it cannot draw from torch's global
generator (a state the program does not hold, which torch-mlir imports as `ml_program.global`, and which no
two devices would draw alike). Instead every random bit is a pure function of

    (seed, step counter, dropout site, global element index)

computed with integer elementwise ops in the program, so the same seed gives bit-identical masks on 1 rank and
on any mesh and strategy: a rank computing its block of a tiled tensor computes the element indices of that
block (`torch.arange` over each dim is a `linalg.generic` reading `linalg.index`, which the partitioner offsets
by the block's start on a tiled dim), not indices from 0.

Details: docs/module-notes.md, `frontends/randomness.py`.
"""

from __future__ import annotations

import contextlib
import re
import traceback

import numpy as np

from slicer.core.errors import FrontendError
from slicer.core.source_lines import user_frame

#: The name of the step's random state (argument and result): int64 [seed, step counter].
RNG = "rng"

WORD = 0xFFFFFFFF
#: Philox4x32's multipliers and Weyl key increments (Random123, philox.h).
PHILOX_M0, PHILOX_M1 = 0xD2511F53, 0xCD9E8D57
PHILOX_W0, PHILOX_W1 = 0x9E3779B9, 0xBB67AE85
ROUNDS = 10
#: Bits of the first output word compared with the dropout probability.
MASK_BITS = 24


def philox4x32(counter, key, rounds: int = ROUNDS):
    """Philox4x32-`rounds` of `counter` (four int64 arrays or tensors, each word in [0, 2^32)) under `key` (two
    such words, arrays or scalars): the four output words, int64 in [0, 2^32). Works on numpy arrays and torch
    tensors alike (`*`, `^`, `&`, `>>`, `+` only)."""
    c0, c1, c2, c3 = counter
    k0, k1 = key
    for round_ in range(rounds):
        if round_:
            k0, k1 = (k0 + PHILOX_W0) & WORD, (k1 + PHILOX_W1) & WORD
        p0, p1 = c0 * PHILOX_M0, c2 * PHILOX_M1  # < 2^64: wraps in int64, its low 64 bits exact
        hi0, lo0 = (p0 >> 32) & WORD, p0 & WORD
        hi1, lo1 = (p1 >> 32) & WORD, p1 & WORD
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
    return c0, c1, c2, c3


def threshold(p: float) -> int:
    """The integer an element's top `MASK_BITS` random bits must stay below to draw a one with probability p."""
    return int(round(p * (1 << MASK_BITS)))


def _draw(index, seed, step, site: int, p: float):
    """Bernoulli(p) of each element (its global row-major `index`, int64), as the module docstring defines it;
    numpy or torch (`seed`, `step`: int64 scalars of the same kind)."""
    counter = (index & WORD, (index >> 32) & WORD, step & WORD, step * 0 + site)  # xor takes tensors only
    bits = philox4x32(counter, (seed & WORD, (seed >> 32) & WORD))[0]
    return (bits >> (32 - MASK_BITS)) < threshold(p)


def dropout_mask(seed: int, step: int, site: int, shape, p: float) -> np.ndarray:
    """The boolean keep-mask of dropout with probability `p` at `site` (the site-th random draw of the forward,
    from 0: dropout calls in order) on step `step` (from 0) of a training step imported with `seed`, for a
    tensor of `shape`: what the program computes, bit for bit, on any mesh. To replay a Slicer training step in
    torch, replace each dropout by `input * (mask / (1 - p))` (torch's CPU arithmetic)."""
    shape = tuple(int(n) for n in shape)
    index = np.arange(int(np.prod(shape, dtype=np.int64)), dtype=np.int64).reshape(shape)
    with np.errstate(over="ignore"):
        return _draw(index, np.int64(seed), np.int64(step), int(site), 1.0 - float(p))


def global_index(torch, shape):
    """The row-major index of every element of a tensor of `shape` (int64), from one `arange` per dim: on a
    block of a partitioned tensor, the indices in the whole tensor."""
    index = torch.zeros((), dtype=torch.int64)
    stride = 1
    for dim in reversed(range(len(shape))):
        view = [1] * len(shape)
        view[dim] = shape[dim]
        index = index + torch.arange(shape[dim], dtype=torch.int64).reshape(view) * stride
        stride *= shape[dim]
    return index.expand(tuple(shape)) if shape else index


def micro_batch_index(torch, shape, micro: int, count: int, rows: int):
    """The element indices of a tensor of `shape` computed from micro-batch `micro` of `count` (`rows` samples
    each, taken as rows `micro`, `micro + count`, ... of the batch: `accumulation.py`), in the tensor the whole
    batch would give. Where dim 0 holds whole samples (its size a multiple of `rows`: c rows per sample, e.g.
    [B, S, D] or [B * S, D]), its row p is row ((p // c) * count + micro) * c + p % c of the whole batch's, so
    the masks are the whole batch's masks at this micro-batch's samples. Elsewhere (dim 0 not the batch's, or a
    0-d tensor) the indices are `micro * numel + index`: distinct draws, but not the whole batch's mask."""
    shape = tuple(shape)
    if not shape or shape[0] % rows:
        return global_index(torch, shape) + micro * int(np.prod(shape, dtype=np.int64))
    per_sample, rest = shape[0] // rows, int(np.prod(shape[1:], dtype=np.int64))
    row = torch.arange(shape[0], dtype=torch.int64)
    if per_sample == 1:
        row = row * count + micro
    else:
        row = (torch.div(row, per_sample, rounding_mode="floor") * count + micro) * per_sample + row % per_sample
    index = row.reshape([shape[0]] + [1] * (len(shape) - 1)) * rest
    if len(shape) > 1:
        index = index + global_index(torch, shape[1:])
    return index.expand(shape)


class RandomStream:
    """The random numbers of one traced step: reads `rng` (the traced int64 [seed, step] argument) and numbers
    the dropout sites in the order the forward calls them. A step accumulating gradients over micro-batches
    calls `start_micro_batch` before each forward: its sites are numbered from 0 again and its elements indexed
    in the whole batch (`micro_batch_index`)."""

    def __init__(self, rng):
        self.rng = rng
        self.sites = 0
        self.drawn = False
        self.micro: tuple[int, int, int] | None = None

    def start_micro_batch(self, micro: int, count: int, rows: int) -> None:
        """Number the next forward's sites from 0, for micro-batch `micro` of `count` of `rows` samples each."""
        self.sites, self.micro = 0, (micro, count, rows)

    def draw(self, torch, shape, p: float):
        """The next site's draws: a bool tensor of `shape`, each True with probability `p`."""
        site, self.sites, self.drawn = self.sites, self.sites + 1, True
        index = (global_index(torch, shape) if self.micro is None or self.micro[1] == 1
                 else micro_batch_index(torch, shape, *self.micro))
        return _draw(index, self.rng[0], self.rng[1], site, p)

    def advanced(self, torch):
        """`rng` after this step: the same seed, the counter plus one."""
        return self.rng + torch.tensor([0, 1], dtype=torch.int64)


_active: list[RandomStream] = []


@contextlib.contextmanager
def random_stream(rng):
    """Trace under a stream reading `rng`: dropout in the traced code draws its masks from it."""
    stream = RandomStream(rng)
    _active.append(stream)
    try:
        yield stream
    finally:
        _active.pop()


def _stream(what: str) -> RandomStream:
    if not _active:
        raise FrontendError(f"{what} in training mode draws random numbers{_where()}, and this import has no random "
                            "state: call .eval() on the model to import inference (from_torch), or import the training "
                            "step with slicer.training_step(..., seed=...), whose dropout masks Slicer computes")
    return _active[-1]


def _where() -> str:
    """` at file.py:line`, the user's line being traced (outside torch, torch-mlir and Slicer), or ''."""
    import torch.fx.traceback as fx_traceback  # optional dependency; only called while torch traces

    meta = fx_traceback.get_current_meta() or {}
    text = meta.get("stack_trace") or "".join(traceback.format_stack())
    frames = " ".join(f'"{file}":{line}:0' for file, line in _frames(text))
    frame = user_frame(frames)
    return f" at {frame[0]}:{frame[1]}" if frame else ""


def _frames(text: str) -> list[tuple[str, int]]:
    """(file, line) of a Python traceback's text, innermost first."""
    found = re.findall(r'File "([^"]+)", line (\d+)', text)
    return [(file, int(line)) for file, line in reversed(found)]


def _generator(generator) -> None:
    if generator is not None:
        raise FrontendError(f"a torch.Generator passed to a random op{_where()} is state Slicer's program cannot hold; "
                            "leave it out: the training step draws from its own seed (training_step(..., seed=...))")


def _bernoulli_(self, p: float = 0.5, generator=None):
    """aten.bernoulli_.float (what dropout calls on CPU: `empty_like(input).bernoulli_(1 - p)`): `self` filled
    with the stream's next draws, one with probability `p`."""
    import torch  # optional dependency; only called while torch traces

    _generator(generator)
    return self.copy_(_stream("bernoulli_ (dropout)").draw(torch, tuple(self.shape), p).to(self.dtype))


def _bernoulli_p(self, p: float = 0.5, generator=None):
    """aten.bernoulli.p: a tensor like `self` of the stream's next draws, one with probability `p`."""
    import torch  # optional dependency; only called while torch traces

    _generator(generator)
    return _stream("bernoulli").draw(torch, tuple(self.shape), p).to(self.dtype)


def _dropout(input, p: float, train):
    """aten.dropout, as torch's CPU kernel computes it: `input * (bernoulli(1 - p) / (1 - p))`."""
    if not train or p == 0:
        return input.clone()
    if p == 1:
        return input * 0
    noise = _bernoulli_p(input, 1 - p)
    return input * noise.div(1 - p)


def _native_dropout(input, p: float, train):
    """aten.native_dropout (what torch.export records): (output as `_dropout`'s, the keep-mask)."""
    import torch  # optional dependency; only called while torch traces

    if train is not None and not train or p == 0:
        return input.clone(), torch.ones_like(input, dtype=torch.bool)
    keep = _stream("dropout").draw(torch, tuple(input.shape), 1 - p)
    return (input * 0 if p == 1 else input * keep.to(input.dtype).div(1 - p)), keep


#: The aten ops (packets) that draw from torch's generator, refused while tracing (`random_decompositions`)
#: unless computed from the stream; `check_no_random_ops` catches any other op tagged `nondeterministic_seeded`.
RANDOM_PACKETS = ("rand", "rand_like", "randn", "randn_like", "randint", "randint_like", "randperm", "normal",
                  "normal_", "uniform_", "exponential_", "geometric_", "log_normal_", "cauchy_", "random_",
                  "multinomial", "bernoulli", "bernoulli_", "poisson", "binomial", "rrelu_with_noise")


def random_decompositions(torch) -> dict:
    """The decompositions of bernoulli draws and dropout that draw from the active `random_stream` (FrontendError
    naming the op and the line without one), and of every other op of `RANDOM_PACKETS`: a FrontendError naming
    the op and the user's line being traced."""
    aten = torch.ops.aten
    table = {}
    for name in RANDOM_PACKETS:
        packet = getattr(aten, name, None)
        for overload in packet.overloads() if packet is not None else ():
            op = getattr(packet, overload)
            if torch.Tag.nondeterministic_seeded in op.tags:
                table[op] = _refusal(op)
    table.update({aten.bernoulli_.float: _bernoulli_, aten.bernoulli.p: _bernoulli_p, aten.dropout.default: _dropout,
                  aten.native_dropout.default: _native_dropout})
    return table


def _refusal(op):
    def refuse(*args, **kwargs):
        raise FrontendError(_refused(op, _where()))

    return refuse


def _refused(op, where: str) -> str:
    return (f"{op}{where} draws random numbers, but a Slicer program keeps no random generator between calls (only "
            "dropout's and bernoulli's draws are computed in the program, from the training step's seed); draw them "
            "outside and pass them as a batch tensor")


def check_no_random_ops(torch, graph, what: str) -> None:
    """FrontendError naming the first op of `graph` (an fx graph) that draws from torch's generator, and the
    user's line that called it: a program of Slicer holds no generator state (only dropout is computed from
    the step's own random state)."""
    for node in graph.graph.nodes:
        target = node.target if node.op == "call_function" else None
        if target is not None and torch.Tag.nondeterministic_seeded in getattr(target, "tags", ()):
            frames = " ".join(f'"{f}":{n}:0' for f, n in _frames(node.meta.get("stack_trace") or ""))
            frame = user_frame(frames)
            line = f" at {frame[0]}:{frame[1]}" if frame else ""
            raise FrontendError(f"{what}: {_refused(target, line)}")


__all__ = ["RNG", "RandomStream", "check_no_random_ops", "dropout_mask", "global_index", "micro_batch_index",
           "philox4x32", "random_decompositions", "random_stream", "threshold"]
