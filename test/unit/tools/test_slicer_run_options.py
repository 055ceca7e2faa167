"""slicer-run's --buckets and --collective-matmul: `slicer.compile`'s arguments on the command line, checked
before anything compiles (a bad value is a usage error, exit 2), and passed on (the compiled program changes).
No MPI run: an unknown --show value stops the tool after compiling."""

from pathlib import Path

from slicer.tools.slicer_run import main

MLP = Path(__file__).resolve().parents[3] / "examples" / "mlp.mlir"
MEGATRON = [str(MLP), "--mesh", "y=2", "--tactic", "arg1.1=y", "--tactic", "arg3.0=y", "--show", "nothing"]


def test_a_bad_setting_is_a_usage_error(capsys):
    assert main([*MEGATRON, "--buckets", "big"]) == 2
    assert "buckets='big': use 'auto'" in capsys.readouterr().err
    assert main([*MEGATRON, "--collective-matmul", "1.5"]) == 2
    assert "collective_matmul='1.5': use 'auto'" in capsys.readouterr().err


def test_the_settings_reach_the_compiled_program(capsys):
    counts = {}
    for chunks in ("off", "2"):
        assert main([*MEGATRON, "--collective-matmul", chunks, "--buckets", "off"]) == 1  # stopped by --show
        out = capsys.readouterr().out
        counts[chunks] = out.count("all_reduce over [y]")
    assert counts == {"off": 1, "2": 2}
