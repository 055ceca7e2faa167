"""Calling kernels: outputs written in place, clear argument errors, each call's descriptors."""

import numpy as np
import pytest

from slicer.lowering import KernelError, compile_library

PROGRAM = """
func.func @scale(%a: tensor<4x6xf32>, %b: tensor<4x6xf32>) -> tensor<4x6xf32> {
  %s = arith.mulf %a, %b : tensor<4x6xf32>
  return %s : tensor<4x6xf32>
}
func.func @two(%a: tensor<5xi32>) -> (tensor<5xi32>, tensor<5xi32>) {
  %s = arith.addi %a, %a : tensor<5xi32>
  %p = arith.muli %a, %a : tensor<5xi32>
  return %s, %p : tensor<5xi32>, tensor<5xi32>
}
"""


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    return compile_library(PROGRAM, cache_dir=tmp_path_factory.mktemp("calls"))


def test_outputs_are_written_into_the_callers_arrays(library):
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    out = np.zeros((4, 6), np.float32)
    assert library["scale"](a, a, out=out) is out
    np.testing.assert_array_equal(out, a * a)
    s, p = np.zeros(5, np.int32), np.zeros(5, np.int32)
    x = np.arange(5, dtype=np.int32)
    result = library["two"](x, out=(s, p))
    assert result[0] is s and result[1] is p
    np.testing.assert_array_equal(s, x + x)
    np.testing.assert_array_equal(p, x * x)
    fresh = library["two"](x)
    np.testing.assert_array_equal(fresh[1], x * x)


def test_kernel_signatures(library):
    scale = library["scale"]
    assert scale.name == "scale"
    assert [(s.shape, s.dtype) for s in scale.inputs] == [((4, 6), np.float32)] * 2
    assert [(s.shape, s.dtype) for s in library["two"].outputs] == [((5,), np.int32)] * 2


@pytest.mark.parametrize(
    "make_args, message",
    [
        (lambda: (np.zeros((4, 6), np.float64), np.zeros((4, 6), np.float32)), "input #0 of kernel @scale must have "
                                                                               "dtype float32, got float64"),
        (lambda: (np.zeros((4, 6), np.float32), np.zeros((6, 4), np.float32)), r"input #1 of kernel @scale must have "
                                                                               r"shape \(4, 6\), got \(6, 4\)"),
        (lambda: (np.zeros((6, 4), np.float32).T, np.zeros((4, 6), np.float32)), "input #0 of kernel @scale is not "
                                                                                 "C-contiguous"),
        (lambda: (np.zeros((4, 6), np.float32),), "takes 2 input arrays, got 1"),
        (lambda: ([[0.0] * 6] * 4, np.zeros((4, 6), np.float32)), "must be a numpy array"),
    ],
)
def test_bad_arguments_are_named(library, make_args, message):
    with pytest.raises(KernelError, match=message):
        library["scale"](*make_args())


def test_bad_outputs_are_named(library):
    a = np.ones((4, 6), np.float32)
    read_only = np.zeros((4, 6), np.float32)
    read_only.flags.writeable = False
    with pytest.raises(KernelError, match="output #0 of kernel @scale is read-only"):
        library["scale"](a, a, out=read_only)
    with pytest.raises(KernelError, match="has 2 outputs, out= gives 1"):
        library["two"](np.zeros(5, np.int32), out=np.zeros(5, np.int32))
    with pytest.raises(KernelError, match=r"no kernel @nope in this library \(kernels: @scale, @two\)"):
        library["nope"]


def test_each_call_follows_the_arrays_passed(library):
    scale = library["scale"]
    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal((4, 6), dtype=np.float32) for _ in range(7)]
    outs = [np.empty((4, 6), np.float32) for _ in range(2)]
    # Cycle through the arrays several times, in two orders, with alternating outputs.
    for step in range(3 * len(arrays)):
        a, b = arrays[step % len(arrays)], arrays[(step * 5 + 1) % len(arrays)]
        out = outs[step % 2]
        scale(a, b, out=out)
        np.testing.assert_array_equal(out, a * b)
    # Contents changed in place: same buffers, new values.
    a = arrays[0]
    a[...] = 3.0
    np.testing.assert_array_equal(scale(a, a, out=outs[0]), np.full((4, 6), 9.0, np.float32))
    # Shape reassigned in place on an array passed before: rejected.
    a.shape = (6, 4)
    with pytest.raises(KernelError, match="must have shape"):
        scale(a, a)
    a.shape = (4, 6)
    # Fresh temporaries whose addresses may reuse freed ones still compute the right thing.
    for value in range(5):
        x = np.full((4, 6), value, np.float32)
        np.testing.assert_array_equal(scale(x, x), x * x)
    # A read-only input (ctypes reads its address another way) and a dtype equal to the spec's but another object.
    frozen = np.full((4, 6), 2.0, np.float32)
    frozen.flags.writeable = False
    np.testing.assert_array_equal(scale(frozen, frozen), np.full((4, 6), 4.0, np.float32))
    other = np.full((4, 6), 3.0, dtype=np.dtype("<f4").newbyteorder("="))
    np.testing.assert_array_equal(scale(other, frozen), np.full((4, 6), 6.0, np.float32))
    # The read-only input is remembered: passed again, with new contents, or reshaped in place.
    frozen.flags.writeable = True
    frozen[...] = 5.0
    frozen.flags.writeable = False
    np.testing.assert_array_equal(scale(other, frozen), np.full((4, 6), 15.0, np.float32))
    frozen.shape = (6, 4)
    with pytest.raises(KernelError, match="input #1 of kernel @scale must have shape"):
        scale(other, frozen)


@pytest.mark.slow
def test_a_call_keeps_no_array_alive(library):
    """A kernel remembers no array it was given or made: the blocks a runtime passes once (every intermediate of a
    training step) are freed when the caller drops them, and a new array at a freed address computes on its own
    data."""
    import gc
    import weakref

    scale = library["scale"]
    a = np.full((4, 6), 2.0, np.float32)
    frozen = np.full((4, 6), 3.0, np.float32)
    frozen.flags.writeable = False  # read another way, and remembered
    out = scale(a, frozen)
    refs = [weakref.ref(a), weakref.ref(frozen), weakref.ref(out)]
    del a, frozen, out
    gc.collect()
    assert [r() for r in refs] == [None, None, None]
    for value in range(3):
        x = np.full((4, 6), value, np.float32)
        np.testing.assert_array_equal(scale(x, x), x * x)


def test_uncached_call_matches(library):
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    out = np.empty_like(a)
    library["scale"].call_uncached(a, a, out=[out])
    np.testing.assert_array_equal(out, a * a)


def test_bound_calls_run_on_their_arrays(library):
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    b = np.full((4, 6), 2.0, np.float32)
    out = np.zeros((4, 6), np.float32)
    bound = library["scale"].bind(a, b, out=out)
    bound()
    np.testing.assert_array_equal(out, a * 2)
    b[...] = 3.0  # same buffers, new contents: the next call sees them
    bound()
    np.testing.assert_array_equal(out, a * 3)
    with pytest.raises(KernelError, match="input #1 of kernel @scale must have dtype float32"):
        library["scale"].bind(a, b.astype(np.float64), out=out)
    with pytest.raises(KernelError, match="takes 2 inputs and 1 outputs, got 1 and 1"):
        library["scale"].bind(a, out=out)


@pytest.mark.parametrize("shape, dtype",
                         [((4, 6), np.float32), ((5,), np.int32), ((), np.float64), ((0, 3), np.float32)])
def test_aligned_empty(shape, dtype):
    from slicer.lowering import aligned_empty

    array = aligned_empty(shape, dtype)
    assert array.shape == shape and array.dtype == dtype and array.flags.c_contiguous and array.flags.writeable
    assert array.ctypes.data % 64 == 0 or array.size == 0
    if len(shape) == 1:  # a length, as np.empty takes it
        assert aligned_empty(shape[0], dtype).shape == shape


def test_large_temporaries_are_reused_correctly_across_calls(cache_dir):
    """The library's allocator (workspace.py) hands a freed 4 MiB temporary to the next call: results
    stay right call after call, and the allocator's symbols are not exported."""
    import shutil
    import subprocess

    from slicer.lowering import compile_library

    text = """
func.func @twice(%a: tensor<1024x1024xf32>, %b: tensor<1024x1024xf32>) -> tensor<1024x1024xf32> {
  %t = arith.mulf %a, %b : tensor<1024x1024xf32>
  %e = tensor.empty() : tensor<1024x1024xf32>
  %tt = linalg.transpose ins(%t : tensor<1024x1024xf32>) outs(%e : tensor<1024x1024xf32>) permutation = [1, 0]
  %r = arith.addf %tt, %a : tensor<1024x1024xf32>
  return %r : tensor<1024x1024xf32>
}
"""
    library = compile_library(text, cache_dir=cache_dir)
    rng = np.random.default_rng(3)
    for _ in range(3):
        a, b = rng.standard_normal((2, 1024, 1024), dtype=np.float32)
        np.testing.assert_array_equal(library["twice"](a, b), (a * b).T + a)
    if shutil.which("nm"):
        exported = subprocess.run(["nm", "-D", "--defined-only", str(library.path)], capture_output=True,
                                  text=True).stdout
        assert "_mlir_memref_to_llvm_alloc" not in exported


def test_libraries_share_one_cache_of_temporaries(cache_dir):
    """Every loaded library's allocator uses the process's one cache (workspace.py): a 4 MiB temporary freed
    by one library's kernel is handed to another library's kernel, and both compute right. `times` is also
    the name of a libc function: the kernel calls its own (linked -Bsymbolic), not libc's, which wrote into
    its input."""
    import ctypes

    from slicer.lowering import compile_library
    from slicer.lowering.workspace import WORKSPACE_STATE

    template = """
func.func @{name}(%a: tensor<1024x1024xf32>, %b: tensor<1024x1024xf32>) -> tensor<1024x1024xf32> {{
  %t = arith.{op} %a, %b : tensor<1024x1024xf32>
  %e = tensor.empty() : tensor<1024x1024xf32>
  %tt = linalg.transpose ins(%t : tensor<1024x1024xf32>) outs(%e : tensor<1024x1024xf32>) permutation = [1, 0]
  %r = arith.addf %tt, %a : tensor<1024x1024xf32>
  return %r : tensor<1024x1024xf32>
}}
"""
    plus = compile_library(template.format(name="plus", op="addf"), cache_dir=cache_dir)
    times = compile_library(template.format(name="times", op="mulf"), cache_dir=cache_dir)
    assert plus.path != times.path
    states = []
    for library in (plus, times):
        state = getattr(library.handle, WORKSPACE_STATE)
        state.restype = ctypes.c_void_p
        states.append(state())
    assert states[0] == states[1]
    a, b = np.random.default_rng(4).standard_normal((2, 1024, 1024), dtype=np.float32)
    a0 = a.copy()
    for _ in range(2):
        np.testing.assert_array_equal(plus["plus"](a, b), (a0 + b).T + a0)
        np.testing.assert_array_equal(times["times"](a, b), (a0 * b).T + a0)
    np.testing.assert_array_equal(a, a0)


def test_outputs_made_by_the_call_are_new_aligned_arrays_it_does_not_remember(library):
    """Without out=, each call writes new 64-byte aligned arrays (a training step's optimizer kernels make dozens)
    and keeps no descriptor of them: a later call cannot write into an array an earlier one returned."""
    two = library["two"]
    x = np.arange(5, dtype=np.int32)
    first = two(x)
    second = two(x + 1)
    for array in (*first, *second):
        assert array.ctypes.data % 64 == 0 and array.flags.c_contiguous and array.flags.writeable
    assert len({array.ctypes.data for array in (*first, *second)}) == 4
    np.testing.assert_array_equal(first[0], x + x)
    np.testing.assert_array_equal(second[1], (x + 1) * (x + 1))
    scalar = compile_library("""
func.func @half(%a: tensor<f32>) -> tensor<f32> {
  %c = arith.constant dense<0.5> : tensor<f32>
  %h = arith.mulf %a, %c : tensor<f32>
  return %h : tensor<f32>
}""", cache_dir=library["two"].library.path.parent)["half"]
    assert scalar(np.array(3.0, np.float32)).item() == 1.5
