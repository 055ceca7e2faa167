"""Messages between a job's driver (`rank_job.RankJob`) and its ranks (`rank_server`), large ones in chunks.

The wire is `multiprocessing.connection`'s framing. A message is pickled with protocol 5, its arrays' buffers
out of band (no copy of a block is made to pickle it); one that is small (up to `CHUNK_BYTES` in all) goes as
one frame, pickled whole, as `Connection.send` would. A larger one goes as a frame announcing its parts
(`PARTS`, the pickle's length, each buffer's length), then the pickle and each buffer in frames of at most
`CHUNK_BYTES`, each copied into the buffer that becomes its array (`recv_bytes_into`): the receiver holds
the message once, plus one frame.

Why chunks: a rank's reply to `state_dict()` or `save()` can be gigabytes (a GPT-2's parameters and AdamW
state are 1.5 GB). Sent as one frame, the driver was inside one `recv` for seconds while the other ranks'
heartbeats waited unread, and it then judged them silent (`RankJob`'s liveness check), ending the job and its
state. In chunks, the driver reads a few megabytes from one rank at a time, every frame counts as a sign of
life of the rank that sent it, and a rank is judged only when nothing from it is waiting to be read.
"""

from __future__ import annotations

import pickle
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from slicer.core.errors import InternalError

CHUNK_BYTES = 8 << 20  # a frame of a large message: a few ms to read, so no rank waits unread for long
PARTS = "slicer-message-parts"  # the first element of the frame that announces a chunked message


def _encoded(message) -> tuple[bytes, list[memoryview]]:
    """`message` pickled with its contiguous buffers out of band: (the pickle, the buffers as bytes)."""
    buffers: list[pickle.PickleBuffer] = []
    header = pickle.dumps(message, protocol=5, buffer_callback=buffers.append)
    return header, [buffer.raw() for buffer in buffers]


def send(connection: Connection, message, *, chunk: int = CHUNK_BYTES) -> int:
    """Send `message` (see the module docstring); the bytes put on the wire."""
    header, buffers = _encoded(message)
    if len(header) + sum(b.nbytes for b in buffers) <= chunk:
        data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        connection.send_bytes(data)
        return len(data)
    announce = pickle.dumps((PARTS, len(header), [b.nbytes for b in buffers]), protocol=pickle.HIGHEST_PROTOCOL)
    connection.send_bytes(announce)
    sent = len(announce)
    for part in [memoryview(header), *buffers]:
        for offset in range(0, part.nbytes, chunk):
            size = min(chunk, part.nbytes - offset)
            connection.send_bytes(part, offset, size)
            sent += size
    return sent


class Receiver:
    """The receiving end of one connection, a frame at a time: `frame()` reads one frame and returns
    (True, message) once a whole message has arrived, (False, None) while a chunked one is under way. A
    driver reading several connections interleaves them frame by frame; `receive()` reads a whole message."""

    def __init__(self, connection: Connection):
        self.connection = connection
        self._parts: list[np.ndarray] | None = None  # the chunked message under way: its pickle, then its buffers
        self._part = 0
        self._offset = 0

    @property
    def receiving(self) -> bool:
        """Whether a chunked message is under way (some of its frames read, not all)."""
        return self._parts is not None

    def frame(self) -> tuple[bool, Any]:
        if self._parts is None:
            message = pickle.loads(self.connection.recv_bytes())
            if not (isinstance(message, tuple) and len(message) == 3 and message[0] == PARTS):
                return True, message
            _, header, sizes = message
            # numpy's empty buffers: not zeroed (a pass over gigabytes saved), page-aligned when large
            self._parts = [np.empty(size, np.uint8) for size in (header, *sizes)]
            self._part, self._offset = 0, 0
        else:
            self._offset += self.connection.recv_bytes_into(self._parts[self._part], self._offset)
        return self._advance()

    def _advance(self) -> tuple[bool, Any]:
        parts = self._parts
        if parts is None:
            raise InternalError("a message's parts advanced before its header came")
        while self._part < len(parts) and self._offset == len(parts[self._part]):
            self._part, self._offset = self._part + 1, 0
        if self._part < len(parts):
            return False, None
        self._parts = None
        # (an ndarray is a buffer; numpy's stubs say so from Python 3.12 on only, mypy checks 3.11)
        return True, pickle.loads(parts[0], buffers=parts[1:])  # type: ignore[arg-type]

    def receive(self):
        """The next whole message (blocking)."""
        while True:
            done, message = self.frame()
            if done:
                return message


__all__ = ["CHUNK_BYTES", "Receiver", "send"]
