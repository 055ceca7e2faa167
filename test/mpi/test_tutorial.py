"""docs/tutorial.md runs as written: every `sh` block in order (in a scratch directory holding a copy of
examples/), each `text` block right below one is an excerpt of its output (its lines appear in that order;
`...` lines are only for the reader), then the `python` blocks as one script. The tutorial launches two
4-rank MPI runs; the whole test takes about half a minute."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TUTORIAL = ROOT / "docs" / "tutorial.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.S | re.M)


def blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced block, in order."""
    return [(m.group(1), m.group(2)) for m in FENCE.finditer(text)]


def commands_with_excerpts(items) -> list[tuple[str, list[str]]]:
    """Each sh block with the text blocks that follow it (before the next sh or python block)."""
    out = []
    for language, body in items:
        if language == "sh":
            out.append((body, []))
        elif language == "text" and out:
            out[-1][1].append(body)
        elif language == "python":
            break
    return out


def assert_excerpt(excerpt: str, output: str, command: str) -> None:
    lines = [line.strip() for line in output.splitlines()]
    at = 0
    for want in (line.strip() for line in excerpt.splitlines()):
        if not want or want == "...":
            continue
        found = next((i for i in range(at, len(lines)) if want in lines[i]), None)
        assert found is not None, f"the tutorial shows a line that `{command.strip()}` no longer prints (in this " \
                                  f"order):\n  {want}\noutput:\n{output}"
        at = found + 1


def test_the_tutorial_parses():
    items = blocks(TUTORIAL.read_text())
    languages = [language for language, _ in items]
    assert languages.count("sh") >= 5 and languages.count("python") >= 1
    first_python = languages.index("python")
    assert "sh" not in languages[first_python:], "the test runs the Python blocks after every sh block"


@pytest.mark.slow
def test_the_tutorial_runs(tmp_path):
    pytest.importorskip("matplotlib")
    items = blocks(TUTORIAL.read_text())
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
               PYTHONUNBUFFERED="1")
    env.pop("SLICER_OVERSUBSCRIBE", None)  # the tutorial says --oversubscribe itself
    for command, excerpts in commands_with_excerpts(items):
        done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", command], cwd=tmp_path, env=env, timeout=300,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert done.returncode == 0, f"`{command.strip()}` failed:\n{done.stdout}"
        for excerpt in excerpts:
            assert_excerpt(excerpt, done.stdout, command)
    script = "\n".join(body for language, body in items if language == "python")
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, timeout=300,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert done.returncode == 0, f"the tutorial's Python failed:\n{done.stdout}"
    out = tmp_path / "tutorial-out"
    for name in ("v4-y.png", "timeline.png", "w1.png", "python-timeline.png", "arg1-w1.png", "result0.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    for name in ("trace.json", "python-trace.json"):
        assert '"traceEvents"' in (out / name).read_text()
    for image in re.findall(r"\]\((images/[^)]+)\)", TUTORIAL.read_text()):
        assert (TUTORIAL.parent / image).is_file(), image
