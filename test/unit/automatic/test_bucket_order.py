"""The search's memory trace forms gradient buckets as `spmd/bucketing.py` does: members in the order they are made,
not the order they are read. A training step reads its gradients in the optimizer, parameter by parameter (the first
layer's first), and makes them in the backward pass (the last layer's first): formed in reading order, the model's first
buckets held the last layer's gradients and were packed early in the backward pass, cutting kernels the compiled
program does not cut (its peak for the GPT step on 2x2 under FSDP-like tilings was 3% low)."""

from slicer.automatic.peak_memory import MemoryTrace

KEY = ("reduce_scatter", ("x", "y"))


def _trace(members, cap):
    trace = MemoryTrace(20, cap)
    for value, made, nbytes, reader in members:  # in the order the optimizer reads them
        trace.bucket_member(KEY, value, made, nbytes, nbytes // 4, reader)
    return trace


def test_members_are_packed_in_the_order_they_are_made():
    # read 10, 11, 12, 13 (first layer first), made 9, 7, 5, 3 (last layer first)
    trace = _trace([(100, 9, 4, 10), (101, 7, 4, 11), (102, 5, 4, 12), (103, 3, 4, 13)], cap=8)
    buckets = sorted(trace.buckets())
    assert [(b[0], b[3]) for b in buckets] == [(5, (103, 102)), (9, (101, 100))]  # (packed after op, members)
    assert [b[1:3] for b in buckets] == [(8, 2), (8, 2)]  # bytes, reduced bytes (a reduce_scatter over 4)
    assert [b[4] for b in buckets] == [12, 10]  # the first op reading a member


def test_a_member_read_before_the_next_is_made_closes_its_bucket():
    trace = _trace([(100, 1, 4, 3), (101, 4, 4, 9), (102, 5, 4, 9)], cap=100)
    assert sorted((b[0], b[3]) for b in trace.buckets()) == [(1, (100,)), (5, (101, 102))]


def test_peak_counts_a_packed_bucket_and_cuts_its_kernel():
    trace = MemoryTrace(6, 100)
    trace.arguments([0])
    for index, value in enumerate(range(1, 7)):
        trace.produce(index, value, 10)
    trace.bucket_member(KEY, 1, 0, 10, 10, 5)
    trace.bucket_member(KEY, 2, 1, 10, 10, 5)
    last_use = {1: 5, 2: 5, 3: 3, 4: 4, 5: 5, 6: 6}
    peak = trace.peak(last_use, results=(6,), last_reader={1: 5, 2: 5, 3: 3, 4: 4, 5: 5})
    assert trace.kernels == 2  # the bucket's collective after op 1 ends the first kernel
    # the members are read by the pack in the kernel making them (not stored); the reduced bucket (20 bytes) is held
    # to op 5 and the result (10) from the start of the second kernel: the values of ops 2-4 live inside it
    assert peak == 20 + 10
