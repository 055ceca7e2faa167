"""The command-line convention every tool follows (slicer.tools.cli, docs/architecture.md layer 15): the same
flag spellings, and exit codes 0 ok, 1 the work failed, 2 a bad command line. In-process: `main(argv)` is what
each console script runs."""

import re
from pathlib import Path

import pytest

from slicer.core.errors import RedistributionError
from slicer.tools import slicer_opt, slicer_plan, slicer_run
from slicer.tools.cli import EXIT_FAILURE, EXIT_OK, EXIT_USAGE

ROOT = Path(__file__).resolve().parents[3]
MLP = str(ROOT / "examples" / "mlp.mlir")
PLAN = ["--mesh", "x=2,y=2", "--shape", "8x8", "--src", "[[x],[y]]", "--dst", "[[y],[x]]"]

TOOLS = {"slicer-opt": slicer_opt, "slicer-plan": slicer_plan, "slicer-run": slicer_run}
# The arguments each tool needs besides the one under test.
BASE = {"slicer-opt": [MLP], "slicer-plan": PLAN, "slicer-run": [MLP, "--mesh", "y=4"]}


def exit_code(tool: str, argv: list[str]) -> int:
    """What the console script exits with: main's return value, or argparse's SystemExit code."""
    try:
        return TOOLS[tool].main(argv)
    except SystemExit as exc:
        return exc.code


@pytest.mark.parametrize("tool", TOOLS)
def test_help_exits_0_and_an_unknown_flag_2(tool, capsys):
    assert exit_code(tool, ["--help"]) == EXIT_OK
    assert exit_code(tool, [*BASE[tool], "--no-such-flag"]) == EXIT_USAGE
    assert "unrecognized arguments: --no-such-flag" in capsys.readouterr().err


@pytest.mark.parametrize("tool", TOOLS)
def test_one_spelling_per_flag(tool):
    text = TOOLS[tool].build_parser().format_help()
    assert re.search(r"-o \S+, --output \S+", text), "the output is -o/--output"
    if tool != "slicer-opt":  # slicer-opt starts no ranks
        assert re.search(r"-n \S+, --ranks \S+", text), "a number of ranks is -n/--ranks"
    assert not re.search(r"--out\b|--reps\b|--repetitions\b", text)


@pytest.mark.parametrize("tool, argv, words", [
    ("slicer-opt", ["/nonexistent/in.mlir"], "cannot read '/nonexistent/in.mlir'"),
    ("slicer-opt", [MLP, "-p", "slicer-no-such-pass"], "unknown slicer pass"),
    ("slicer-plan", [*PLAN, "--cost-model", "/nonexistent.json"], "cannot read the cost model"),
    ("slicer-plan", ["--mesh", "x=2", "--shape", "8", "--src", "[[q]]", "--dst", "[[]]"], "unknown mesh axis 'q'"),
    ("slicer-run", ["/nonexistent/prog.mlir", "--mesh", "y=4"], "cannot read '/nonexistent/prog.mlir'"),
    ("slicer-run", [MLP, "--mesh", "y=0"], "size 0"),
    ("slicer-run", [MLP, "--mesh", "y=4", "-n", "2"], "use -n 4"),
    ("slicer-run", [MLP, "--mesh", "y=4", "--inputs", "/nonexistent/a.npy"], "does not exist"),
    ("slicer-run", [MLP, "--mesh", "y=4", "--memory-budget", "1GiB"], "give --auto with it"),
    ("slicer-run", [MLP, "--mesh", "y=4", "--auto", "--memory-budget", "lots"], "memory budget 'lots' does not parse"),
    ("slicer-run", [MLP, "--mesh", "y=4", "--collectives", "nccl"], "collectives='nccl': how ranks run collectives"),
    ("slicer-run", [MLP, "--mesh", "y=4", "--overlap", "sometimes"], "--overlap 'sometimes': 1 (collectives overlap"),
])
def test_a_command_line_that_cannot_be_used_exits_2(tool, argv, words, capsys):
    assert exit_code(tool, argv) == EXIT_USAGE
    err = capsys.readouterr().err
    assert f"{tool}: error:" in err and words in err and "Traceback" not in err


@pytest.mark.slow
def test_failures_exit_1(tmp_path, monkeypatch, capsys):
    malformed = tmp_path / "bad.mlir"
    malformed.write_text("func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {\n  %0 = arith.negf %a tensor<4xf32>\n}\n")
    assert exit_code("slicer-opt", [str(malformed)]) == EXIT_FAILURE
    assert "bad.mlir:2:" in capsys.readouterr().err
    # A tactic naming an axis the mesh does not have: the program does not compile.
    assert exit_code("slicer-run", [MLP, "--mesh", "y=4", "--tactic", "arg1.1=z"]) == EXIT_FAILURE
    assert "slicer-run: error:" in capsys.readouterr().err
    # --auto with a budget nothing fits: the search fails, naming the smallest peak it found.
    assert exit_code("slicer-run", [MLP, "--mesh", "y=4", "--auto", "--memory-budget", "64"]) == EXIT_FAILURE
    assert "the smallest peak found is" in capsys.readouterr().err

    def wrong(plan):
        raise RedistributionError("device 0 holds the wrong block")

    monkeypatch.setattr(slicer_plan, "simulate", wrong)  # --check finding a mismatch
    assert exit_code("slicer-plan", [*PLAN, "--check"]) == EXIT_FAILURE
    assert "slicer-plan: check failed: device 0 holds the wrong block" in capsys.readouterr().err
