"""Tests of the fuzzer itself, so that it cannot pass silently: the programs are valid MLIR, the numpy
reference agrees with the project's (unpartitioned) JIT, the checker flags wrong results, the classifier
tells clean errors from internal ones, hangs and crashes are caught, and cases replay and shrink."""

import os
import random

import numpy as np
import pytest
from mlir import ir

import slicer
from fuzz.cases import Case, generate_case
from fuzz.errors import is_clean, key_line, normalize, signature
from fuzz.programs import Op, Program, compare, generate
from fuzz.schedules import TacticSpec, schedule_valid
from fuzz.shrink import replay, shrink
from fuzz.source import RandomSource
from slicer.dialect import make_context

JIT_CASES = int(os.environ.get("SLICER_FUZZ_JIT_CASES", "600" if os.environ.get("SLICER_NIGHTLY") == "1" else "60"))


@pytest.mark.slow
def test_programs_parse_and_verify():
    kinds = set()
    with make_context():
        for s in range(300):
            program = generate(RandomSource(s))
            module = ir.Module.parse(program.to_mlir())
            assert module.operation.verify()
            kinds |= {op.kind for op in program.ops}
            program.evaluate(program.random_inputs(s))
    assert kinds >= {"unary", "binary", "reduce", "matmul", "batch_matmul", "transpose", "broadcast", "expand",
                     "collapse", "fill", "splat"}


def test_generated_programs_cover_the_op_set():
    texts = "\n".join(generate(RandomSource(s)).to_mlir() for s in range(300))
    for needle in ("linalg.matmul", "linalg.batch_matmul", "linalg.transpose", "linalg.generic", "linalg.reduce",
                   "linalg.broadcast", "linalg.fill", "tensor.expand_shape", "tensor.collapse_shape",
                   "arith.constant dense<", "math.tanh", "math.exp", "arith.maximumf", "arith.maxsi",
                   "tensor<f32>", "xi32>", "xf64>", "xbf16>", "linalg.add", "linalg.exp", '"reduction"'):
        assert needle in texts, needle


@pytest.mark.slow
def test_reference_agrees_with_the_jit(fuzz_pool):
    """The numpy evaluator against slicer's JIT on unpartitioned programs (validates the evaluator)."""
    bad = []
    for s in range(JIT_CASES):
        case = generate_case(RandomSource(50_000 + s), seed=s)
        out = fuzz_pool.request({"op": "jit", "case": case.to_json()}, 120)
        if out["kind"] != "ok":
            bad.append(f"seed {50_000 + s}: {out['kind']}: {out['message'][:300]}")
    assert not bad, "\n".join(bad)


def _row_sum_case() -> Case:
    program = Program("f32", [("%a0", (8, 6))],
                      [Op("reduce", ("%a0",), "%v0", (8,), {"fn": "sum", "dims": [1], "form": "generic"}),
                       Op("unary", ("%v0",), "%v1", (8,), {"fn": "tanh", "form": "generic"})],
                      ["%v1"])
    return Case(program, {"x": 2}, [TacticSpec("tile", "arg", 0, 0, ("x",))], seed=3)


def test_a_known_good_case_is_ok(fuzz_pool):
    out = fuzz_pool.request({"op": "case", "case": _row_sum_case().to_json()}, 120)
    assert out["kind"] == "ok", out


def test_corrupted_results_are_reported_wrong(fuzz_pool):
    out = fuzz_pool.request({"op": "case", "case": _row_sum_case().to_json(), "corrupt": True}, 120)
    assert out["kind"] == "wrong" and out["stage"] == "check-sim", out
    assert out["signature"] == "wrong|check-sim"


def test_invalid_schedule_is_a_clean_error(fuzz_pool):
    case = _row_sum_case()
    case.tactics = [TacticSpec("tile", "arg", 0, 1, ("x",)), TacticSpec("tile", "arg", 0, 0, ("w",))]
    assert not case.valid
    out = fuzz_pool.request({"op": "case", "case": case.to_json()}, 120)
    assert out["kind"] == "clean-error", out


def test_compare():
    p = Program("f32", [("%a0", (3,))], [], ["%a0"])
    ref = p.evaluate([np.array([1.0, -2.0, 0.5], np.float32)])
    assert compare(p, ref, np.array([1.0, -2.0, 0.5], np.float32)) is None
    assert compare(p, ref, np.array([1.0, -2.0, 0.50001], np.float32)) is None
    assert compare(p, ref, np.array([1.0, -2.0, 0.6], np.float32)) is not None
    assert compare(p, ref, np.array([1.0, -2.0, 0.5], np.float64)) is not None  # dtype
    assert compare(p, ref, np.array([1.0, -2.0], np.float32)) is not None  # shape
    ref.results[0][1] = np.nan
    assert compare(p, ref, np.array([1.0, np.nan, 0.5], np.float32)) is None  # NaN equals NaN
    assert compare(p, ref, np.array([1.0, 2.0, 0.5], np.float32)) is not None
    q = Program("i32", [("%a0", (2,))], [], ["%a0"])
    ref = q.evaluate([np.array([7, -3], np.int32)])
    assert compare(q, ref, np.array([7, -3], np.int32)) is None
    assert compare(q, ref, np.array([7, -2], np.int32)).max_diff == 1


def test_reference_wraps_i32_like_mlir():
    p = Program("i32", [("%a0", (2,))],
                [Op("unary", ("%a0",), "%v0", (2,), {"fn": "square", "form": "generic"}),
                 Op("reduce", ("%v0",), "%v1", (), {"fn": "sum", "dims": [0], "form": "reduce"})], ["%v1"])
    big = np.array([65536, 65536], np.int32)
    assert int(p.evaluate([big]).results[0]) == 0  # 2 * 2**32 wraps to 0


def test_error_classes():
    assert is_clean(slicer.CompileError("dim 0 of size 6 is not divisible by 4"))
    assert is_clean(slicer.InvalidTactic("axis 'x' is listed twice"))
    assert is_clean(slicer.RunError("argument #0 must be float32[2]"))
    assert not is_clean(slicer.CompileError("internal error in slicer pass 'slicer-propagate' (please report)"))
    assert not is_clean(slicer.CompileError("error: expected 'tensor<4xf32>'\n note: see current operation: ..."))
    assert not is_clean(KeyError("x"))
    assert not is_clean(IndexError("list index out of range"))


def test_signatures():
    msg = ("Failure while executing pass pipeline:\nerror: \"<text>\":0:0: internal error in slicer pass "
           "'slicer-propagate' (please report):\n  Traceback (most recent call last):\n"
           '    File "/x/rules/from_linalg.py", line 39, in linalg_rule\n      generic = next(o)\n  StopIteration\n')
    assert key_line(msg) == "StopIteration (in from_linalg.py:linalg_rule)"
    a = normalize("error: \"<text>\":3:9: dim 0 of size 6 is not divisible by 4 = x(2)*z(2) in [[x,z],[]]")
    b = normalize("error: \"<text>\":7:1: dim 1 of size 10 is not divisible by 4 = y(2)*x(2) in [[],[y,x]]")
    assert a == b
    assert signature("wrong", "check-sim", "", "whatever") == "wrong|check-sim"


@pytest.mark.slow
def test_hang_and_crash_are_caught(tmp_path):
    from fuzz.worker import Worker

    worker = Worker(log_dir=str(tmp_path))
    try:
        out = worker.request({"op": "sleep", "seconds": 60}, timeout=3)
        assert out["kind"] == "hang"
        out = worker.request({"op": "crash"}, timeout=60)
        assert out["kind"] == "internal-error" and out["stage"] == "crash", out
        out = worker.request({"op": "sleep", "seconds": 0}, timeout=60)  # a fresh worker takes over
        assert out["kind"] == "ok"
    finally:
        worker.close()


def test_cases_replay_from_their_choices():
    for s in range(50):
        case = generate_case(RandomSource(s), seed=s)
        again = replay(case.choices, seed=s)
        assert again.mlir == case.mlir and again.mesh == case.mesh and again.tactics == case.tactics
        assert Case.from_json(case.to_json()).mlir == case.mlir


def test_any_choice_sequence_is_a_valid_program():
    rng = random.Random(0)
    with make_context():
        for _ in range(100):
            choices = [rng.randrange(0, 50) for _ in range(rng.randrange(0, 60))]
            case = replay(choices, seed=0)
            assert ir.Module.parse(case.mlir).operation.verify()


def test_shrink_finds_a_small_case():
    def has_matmul(c: Case) -> bool:
        return any(op.kind == "matmul" for op in c.program.ops)

    start = next(c for s in range(100) if has_matmul(c := generate_case(RandomSource(s), seed=s))
                 and len(c.program.ops) >= 5)
    small, _ = shrink(start, has_matmul, budget=400)
    assert has_matmul(small)
    assert len(small.program.ops) <= 3 and len(small.tactics) <= 1
    assert len(small.choices) < len(start.choices)


def test_valid_schedules_are_valid():
    """A valid tile divides its dim, or is over one axis (padded blocks); some valid tiles are uneven."""
    n_valid = n_uneven = 0
    for s in range(300):
        case = generate_case(RandomSource(s), seed=s)
        n_valid += case.valid
        for t in case.tactics:
            if t.kind == "tile" and case.valid:
                shape = (case.program.arg_shapes if t.target == "arg" else case.program.result_shapes)[t.index]
                product = int(np.prod([case.mesh[a] for a in t.axes]))
                assert shape[t.dim] % product == 0 or len(t.axes) == 1
                n_uneven += shape[t.dim] % product != 0
        assert 1 <= case.devices <= 8 and 1 <= len(case.mesh) <= 3
    assert 0.5 < n_valid / 300 < 0.95
    assert n_uneven >= 20
    assert not schedule_valid(_row_sum_case().program, {"x": 2}, [TacticSpec("tile", "arg", 0, 0, ("x", "x"))])


@pytest.mark.parametrize("dtype", ["f32", "f64", "i32", "bf16"])
def test_inputs_are_bounded(dtype):
    p = Program(dtype, [("%a0", (4, 4)), ("%a1", ())], [], ["%a0"])
    a, s = p.random_inputs(1)
    assert a.dtype == np.dtype({"f32": np.float32, "f64": np.float64, "i32": np.int32, "bf16": "bfloat16"}[dtype])
    assert s.shape == ()
    assert np.all(np.abs(a) <= 4)


@pytest.mark.mpi
def test_mpi_path_of_the_harness(fuzz_pool):
    """A known-good case through the MPI executor as well (ranks = devices)."""
    out = fuzz_pool.request({"op": "case", "case": _row_sum_case().to_json(), "mpi": True, "mpi_timeout": 200}, 240)
    assert out["kind"] == "ok" and out["stage"] == "check-mpi", out


@pytest.mark.slow
def test_generation_never_fails():
    """The runner generates every case in the parent: a generator exception would stop a whole run."""
    from fuzz.programs import Features

    for s in range(2000):
        for features in (Features(), Features(zero_d=False, multi_result=False, return_args=False)):
            case = generate_case(RandomSource(s), seed=s, features=features)
            case.program.evaluate(case.program.random_inputs(s))
            if not features.zero_d:
                assert all(len(sh) > 0 for sh in case.program.arg_shapes + case.program.result_shapes)


def test_aot_stage_runs(fuzz_pool):
    out = fuzz_pool.request({"op": "case", "case": _row_sum_case().to_json(), "aot": True}, 240)
    assert out["kind"] == "ok" and out["stage"] == "check-aot", out


GUARD_CHILD = """
import ctypes, sys
import numpy as np
from fuzz.guarded import guarded_copy
keep = []
array = np.arange(7, dtype=np.float32).reshape(7, 1)
copy = guarded_copy(array, sys.argv[1] == "after", keep)
assert np.array_equal(copy, array) and copy.flags.c_contiguous
address = copy.ctypes.data
print(ctypes.c_float.from_address(address).value, ctypes.c_float.from_address(address + 24).value, flush=True)
outside = address + 28 if sys.argv[1] == "after" else address - 4
print(ctypes.c_float.from_address(outside).value, flush=True)
"""


@pytest.mark.parametrize("side", ["after", "before"])
def test_guarded_copies_fault_on_a_read_past_them(side):
    """The AOT stage's guarded inputs (`fuzz/guarded.py`): the copy reads as the array, a read one element past its
    edge faults (a kernel reading past an operand crashes its case)."""
    import subprocess
    import sys
    from pathlib import Path

    test_dir = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", GUARD_CHILD, side], capture_output=True, text=True,
                          cwd=test_dir, timeout=60)
    assert done.stdout.splitlines() == ["0.0 6.0"] and done.returncode == -11, (done.returncode, done.stderr[-500:])


def test_guarded_copies_keep_shape_and_values():
    """0-d blocks (a loss), transposed views and empty blocks are copied as they are (kernels check shapes)."""
    from fuzz.guarded import guarded_copy

    keep = []
    for array in (np.full((), 3.0, np.float32), np.arange(6, dtype=np.float32).reshape(2, 3).T,
                  np.zeros((0, 3), np.float32)):
        for at_end in (True, False):
            copy = guarded_copy(array, at_end, keep)
            assert copy.shape == array.shape and copy.flags.c_contiguous and np.array_equal(copy, array)
