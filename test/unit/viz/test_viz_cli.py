"""slicer-run's viewing flags that need no MPI run: --show prints pictures, and bad values are clear
errors before anything is launched."""

from viz_examples import EXAMPLES

from slicer.tools.slicer_run import main


def test_show_of_an_unknown_value_stops_before_running(capsys):
    code = main([str(EXAMPLES / "mlp.mlir"), "--mesh", "y=4", "--tactic", "arg1.1=y", "--tactic", "arg3.0=y",
                 "--show", "w1", "--show", "nothing"])
    out, err = capsys.readouterr()
    assert code == 1
    assert "argument #1 %w1 (%1): f32[16, 32] as [[],[y]] on mesh y=4" in out
    assert "slicer-run: error: no value 'nothing' in the kernel graph of @mlp" in err
    assert "== ran" not in out
