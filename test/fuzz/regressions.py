"""Regression cases: shrunk failures saved as JSON under test/fuzz/regressions/ and replayed by pytest."""

from __future__ import annotations

import json
from pathlib import Path

from .cases import Case

DIRECTORY = Path(__file__).resolve().parent / "regressions"


def expected_class(case: Case) -> str:
    """What a fixed slicer should do: run right on a valid schedule, reject an invalid one cleanly."""
    return "ok" if case.valid else "clean-error"


def save(case: Case, outcome: dict, directory: Path | None = None, note: str = "", mpi: bool = False,
         aot: bool = False) -> Path:
    directory = Path(directory or DIRECTORY)
    directory.mkdir(parents=True, exist_ok=True)
    data = case.to_json()
    data["expect"] = expected_class(case)
    data["mpi"] = mpi
    data["aot"] = aot or mpi
    data["observed"] = {k: outcome.get(k) for k in ("kind", "stage", "type", "signature", "max_diff")}
    message = outcome.get("message") or ""
    data["observed"]["message"] = message if len(message) <= 3000 else message[:800] + "\n[...]\n" + message[-2200:]
    data["note"] = note
    path = directory / f"{case.key()}.json"
    path.write_text(json.dumps(data, indent=1) + "\n")
    return path


def load(path: Path) -> tuple[Case, dict]:
    data = json.loads(Path(path).read_text())
    return Case.from_json(data), data


def files(directory: Path | None = None) -> list[Path]:
    return sorted(Path(directory or DIRECTORY).glob("*.json"))
