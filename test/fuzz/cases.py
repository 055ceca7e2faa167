"""A fuzz case: a program, a mesh, tactics and an inputs seed (JSON-able, printable as a reproducer)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

from .programs import Features, Program, generate
from .schedules import TacticSpec, generate_schedule, mesh_text, schedule_valid
from .source import Source


@dataclass
class Case:
    program: Program
    mesh: dict[str, int]
    tactics: list[TacticSpec]
    seed: int = 0  # inputs seed
    choices: list[int] | None = field(default=None, compare=False)  # the choice sequence that generated it
    text: str | None = field(default=None, compare=False)  # the MLIR as saved (regression files), if any

    @property
    def mlir(self) -> str:
        return self.text if self.text is not None else self.program.to_mlir()

    @property
    def valid(self) -> bool:
        return schedule_valid(self.program, self.mesh, self.tactics)

    @property
    def devices(self) -> int:
        n = 1
        for s in self.mesh.values():
            n *= s
        return n

    def key(self) -> str:
        text = json.dumps([self.mlir, self.mesh, [t.to_json() for t in self.tactics], self.seed], sort_keys=True)
        return hashlib.sha1(text.encode()).hexdigest()[:10]

    def to_json(self) -> dict:
        d = {"mlir": self.mlir, "mesh": self.mesh, "tactics": [t.to_json() for t in self.tactics],
             "tactics_text": ";".join(t.text() for t in self.tactics), "seed": self.seed,
             "valid_schedule": self.valid, "program": self.program.to_json()}
        if self.choices is not None:
            d["choices"] = list(self.choices)
        return d

    @staticmethod
    def from_json(d: dict) -> Case:
        return Case(Program.from_json(d["program"]), dict(d["mesh"]), [TacticSpec.from_json(t) for t in d["tactics"]],
                    int(d.get("seed", 0)), d.get("choices"), d.get("mlir"))

    def reproducer(self) -> str:
        """The case as a human reads it: the MLIR, the mesh and the tactics (Python and slicer-run forms)."""
        tactics = ", ".join(t.python() for t in self.tactics)
        flags = " ".join(f"--tactic {t.text()}" for t in self.tactics)
        mesh_kw = ", ".join(f"{a}={s}" for a, s in self.mesh.items())
        return (f"{self.mlir}"
                f"mesh: {mesh_text(self.mesh)}   tactics: [{tactics}]   inputs seed {self.seed}"
                f"{'' if self.valid else '   (schedule not valid)'}\n"
                f"python: slicer.compile(text, mesh=slicer.Mesh({mesh_kw}), tactics=[{tactics}])\n"
                f"cli:    slicer-run case.mlir --mesh {mesh_text(self.mesh)} {flags} --random 0 --check\n")


def generate_case(src: Source, seed: int = 0, max_ops: int = 8, features: Features = Features()) -> Case:
    program = generate(src, max_ops=max_ops, features=features)
    mesh, tactics = generate_schedule(src, program)
    return Case(program, mesh, tactics, seed, list(src.choices))
