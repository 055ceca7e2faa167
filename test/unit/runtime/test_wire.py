"""The driver-rank wire (runtime/jobs/wire.py): large messages go in chunks and arrive whole, a frame at a time."""

import threading
from multiprocessing import Pipe

import numpy as np

from slicer.runtime.jobs.wire import Receiver, send


def _message(rng):
    return ("ok", {0: rng.standard_normal((300, 70)).astype(np.float32),
                   3: np.arange(1000, dtype=np.int64).reshape(10, 100)[:, ::3],  # not contiguous: in the pickle
                   5: np.zeros((0, 4)), "name": "w", "scalar": np.float64(2.5)})


def _same(got, want):
    assert got[0] == want[0] and got[1].keys() == want[1].keys()
    for key, value in want[1].items():
        if isinstance(value, np.ndarray):
            assert got[1][key].dtype == value.dtype and np.array_equal(got[1][key], value)
        else:
            assert got[1][key] == value


def test_a_small_message_is_one_frame_and_a_large_one_arrives_whole_in_chunks():
    here, there = Pipe()
    rng = np.random.default_rng(0)
    small, large = ("beat", None), _message(rng)
    assert send(here, small, chunk=1 << 20) == len(there.recv_bytes())  # one frame, as Connection.send
    sender = threading.Thread(target=lambda: [send(here, large, chunk=4096), send(here, small, chunk=4096)])
    sender.start()
    receiver, frames = Receiver(there), 0
    while True:
        done, got = receiver.frame()
        frames += 1
        if done:
            break
    assert frames > 300 * 70 * 4 // 4096  # the array's bytes came in frames of at most a chunk
    _same(got, large)
    assert got[1][0].flags.writeable and got[1][0].flags.c_contiguous
    assert receiver.receive() == small and not receiver.receiving
    sender.join()


def test_frames_of_two_senders_interleave_on_the_receiving_side():
    """A driver reads two ranks a frame at a time: neither large reply waits for the other to finish."""
    rng = np.random.default_rng(1)
    pipes = [Pipe() for _ in range(2)]
    messages = [_message(rng) for _ in range(2)]
    senders = [threading.Thread(target=send, args=(p[0], m), kwargs={"chunk": 8192}) for p, m in zip(pipes, messages)]
    for s in senders:
        s.start()
    receivers = [Receiver(p[1]) for p in pipes]
    got, order = {}, []
    while len(got) < 2:
        for i, r in enumerate(receivers):
            if i not in got:
                done, message = r.frame()
                order.append(i)
                if done:
                    got[i] = message
    for i in range(2):
        _same(got[i], messages[i])
    assert order[:4] == [0, 1, 0, 1]
    for s in senders:
        s.join()
