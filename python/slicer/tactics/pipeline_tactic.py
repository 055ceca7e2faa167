"""The pipeline tactic: cut a training step into stages over one mesh axis (`slicer.strategies.pipeline`).

Unlike `Tile` and `Replicate`, which ask for the blocks of one value, `Pipeline` asks for the whole step to be
run as stages, each on its own devices of `axis` with its own program (MPMD), micro-batches flowing through
them in the order of `schedule`. It composes with the other tactics by concatenation: those lay out each
stage's programs over the mesh's other axes. Its text form:

    pipeline(axis=p, split=[blocks.4, blocks.8], microbatches=8, schedule=1f1b)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from slicer.core.errors import InvalidTactic

SCHEDULE_NAMES = ("gpipe", "1f1b", "interleaved")


@dataclass(frozen=True)
class Pipeline:
    """Stages over `axis`: begun at the modules `split` names (else `stages` of them, placed by the cost
    model), `microbatches` per step, run in the order of `schedule` with `virtual_stages` model chunks per
    stage (the interleaved schedule)."""

    axis: str
    microbatches: int
    split: Sequence[str] | None = None  # a tuple once made (`__post_init__`)
    stages: int | None = None
    schedule: str = "1f1b"
    virtual_stages: int = 1

    def __post_init__(self):
        if not isinstance(self.axis, str) or not self.axis:
            raise InvalidTactic(f"pipeline: axis={self.axis!r} must be a mesh axis name")
        for name in ("microbatches", "virtual_stages"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidTactic(f"pipeline: {name}={value!r} must be an integer >= 1")
        if self.schedule not in SCHEDULE_NAMES:
            raise InvalidTactic(f"pipeline: schedule={self.schedule!r} must be one of {', '.join(SCHEDULE_NAMES)}")
        if (self.virtual_stages > 1) != (self.schedule == "interleaved"):
            raise InvalidTactic("pipeline: virtual_stages > 1 goes with schedule='interleaved', and it needs them")
        if (self.split is None) == (self.stages is None):
            raise InvalidTactic("pipeline: give split=[module names that begin each later stage] or stages=N, "
                                "one of them")
        if self.split is not None:
            if isinstance(self.split, str) or not self.split or not all(isinstance(s, str) for s in self.split):
                raise InvalidTactic(f"pipeline: split={self.split!r} must be a non-empty list of module names")
            object.__setattr__(self, "split", tuple(self.split))
        elif isinstance(self.stages, bool) or not isinstance(self.stages, int) or self.stages < 2:
            raise InvalidTactic(f"pipeline: stages={self.stages!r} must be an integer >= 2")

    def __str__(self) -> str:
        cut = f"split=[{', '.join(self.split)}]" if self.split is not None else f"stages={self.stages}"
        chunks = f", virtual_stages={self.virtual_stages}" if self.virtual_stages > 1 else ""
        return (f"pipeline(axis={self.axis}, {cut}, microbatches={self.microbatches}, "
                f"schedule={self.schedule}{chunks})")


__all__ = ["Pipeline", "SCHEDULE_NAMES"]
