"""The ranks' hook (`slicer.runtime.jobs.rank.at_step`): the file `$SLICER_RANK_HOOK` names runs at each named step,
nothing runs without one, and a bad file is a `LaunchError` that says what to give. The tests' own faults
(test/rank_faults.py) are loaded through it in test/mpi."""

import pytest

from slicer.core.environment import RANK_HOOK
from slicer.core.errors import LaunchError
from slicer.runtime.jobs.rank import at_step


def test_the_named_file_runs_at_each_step(tmp_path, monkeypatch):
    seen = tmp_path / "seen.txt"
    hook = tmp_path / "hook.py"
    hook.write_text(f"def at_step(rank, step):\n    with open({str(seen)!r}, 'a') as f:\n"
                    "        f.write(f'{rank}:{step}\\n')\n")
    monkeypatch.setenv(RANK_HOOK.name, str(hook))
    at_step(0, "compiled")
    at_step(1, "step0")
    assert seen.read_text().splitlines() == ["0:compiled", "1:step0"]
    monkeypatch.delenv(RANK_HOOK.name)
    at_step(0, "run")
    assert seen.read_text().splitlines() == ["0:compiled", "1:step0"]


def test_a_bad_hook_says_what_to_give(tmp_path, monkeypatch):
    monkeypatch.setenv(RANK_HOOK.name, str(tmp_path / "missing.py"))
    with pytest.raises(LaunchError, match="SLICER_RANK_HOOK=.*missing.py' is not a Python file"):
        at_step(0, "run")
    empty = tmp_path / "empty.py"
    empty.write_text("x = 1\n")
    monkeypatch.setenv(RANK_HOOK.name, str(empty))
    with pytest.raises(LaunchError, match=r"defines no at_step\(rank, step\)"):
        at_step(0, "run")
