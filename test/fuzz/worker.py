"""Worker subprocesses: cases run out of process, with a time limit, so a hang or a crash in C code cannot
stall or kill the fuzzer.

Protocol: the parent writes one JSON request per line to the worker's stdin and reads one JSON outcome per
line from the worker's *original* stdout (the worker points fd 1 at stderr at start, so stray prints from
C code cannot corrupt the protocol). Requests: `{"op": "case", "case": ..., "mpi": bool, "aot": bool,
"corrupt": bool}`,
`{"op": "training", "case": ..., "mpi": bool, "corrupt": bool}` (a training case, `training.py`),
`{"op": "slicing", "case": ...}` (a slicing case, `slicing.py`),
`{"op": "jit", "case": ...}`, and for the fuzzer's own tests `sleep` and `crash`.

Parent side: `Worker.request(req, timeout)` returns an `Outcome` dict; a timeout kills the worker's whole
process group (its mpiexec and ranks too) and reports `hang`; a worker that dies reports
`internal-error` at stage `crash` with the tail of its stderr. `Pool` runs requests on `jobs` workers; a
request that runs on MPI ranks runs alone (the machine is small).
"""

from __future__ import annotations

import json
import os
import queue
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

TEST_DIR = Path(__file__).resolve().parent.parent  # test/, which holds the `fuzz` package


def default_cache_dir() -> str:
    return os.environ.get("SLICER_CACHE_DIR") or os.path.join(tempfile.gettempdir(), f"slicer-fuzz-cache-{os.getuid()}")


def worker_env(cache_dir: str | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(TEST_DIR)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["SLICER_CACHE_DIR"] = cache_dir or default_cache_dir()
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.setdefault("PYTHONFAULTHANDLER", "1")  # a worker killed by a signal leaves its Python stack in its stderr
    return env


# ============================================================================ worker side


def _serve() -> None:
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    from .cases import Case
    from .execute import Outcome, check_jit, execute

    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        op = req.get("op")
        print(f"--- request {op} {req.get('tag', '')}", file=sys.stderr, flush=True)
        try:
            if op == "case":
                out = execute(Case.from_json(req["case"]), mpi=req.get("mpi", False), aot=req.get("aot", False),
                              corrupt=req.get("corrupt", False), mpi_timeout=req.get("mpi_timeout", 120.0))
            elif op == "training":
                from .training import TrainingCase, execute_training

                out = execute_training(TrainingCase.from_json(req["case"]), mpi=req.get("mpi", False),
                                       mpi_timeout=req.get("mpi_timeout", 120.0), corrupt=req.get("corrupt", False))
            elif op == "slicing":
                from .slicing import SlicingCase, execute_slicing

                out = execute_slicing(SlicingCase.from_json(req["case"]))
            elif op == "jit":
                out = check_jit(Case.from_json(req["case"]))
            elif op == "sleep":
                time.sleep(req["seconds"])
                out = Outcome("ok", "sleep")
            elif op == "crash":
                os.abort()
            else:
                out = Outcome("fuzzer-error", "request", "", f"unknown request {op!r}", f"fuzzer-error|{op}")
        except Exception as exc:  # noqa: BLE001 - a bug of the fuzzer itself, reported as such
            import traceback

            out = Outcome("fuzzer-error", "harness", type(exc).__name__, traceback.format_exc()[-4000:],
                          f"fuzzer-error|{type(exc).__name__}|{exc}")
        proto.write(json.dumps(out.to_json()) + "\n")
        proto.flush()


# ============================================================================ parent side


class Worker:
    def __init__(self, *, cache_dir: str | None = None, recycle: int = 300, log_dir: str | None = None) -> None:
        self.env = worker_env(cache_dir)
        self.recycle = recycle
        self.proc: subprocess.Popen | None = None
        self.served = 0
        log_dir = log_dir or tempfile.mkdtemp(prefix="slicer-fuzz-logs-")
        fd, self.log_path = tempfile.mkstemp(prefix="worker-", suffix=".log", dir=log_dir)
        os.close(fd)
        self.buffer = b""

    def start(self) -> None:
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "fuzz.worker"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log, env=self.env, start_new_session=True)
        self.buffer = b""
        self.served = 0

    def kill(self) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the worker's own session: it, mpiexec, the ranks
        except ProcessLookupError:
            pass
        self.proc.wait()
        self.proc = None
        self.log.close()

    def close(self) -> None:
        if self.proc is None:
            return
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=10)
            self.proc = None
            self.log.close()
        except (subprocess.TimeoutExpired, BrokenPipeError, OSError):
            self.kill()

    def _log_tail(self, offset: int) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(offset)
                return f.read().decode(errors="replace")[-4000:]
        except OSError:
            return ""

    def request(self, req: dict, timeout: float) -> dict:
        if self.proc is not None and self.served >= self.recycle:
            self.close()
        if self.proc is None or self.proc.poll() is not None:
            if self.proc is not None:
                self.kill()
            self.start()
        offset = os.path.getsize(self.log_path)
        self.served += 1
        try:
            self.proc.stdin.write((json.dumps(req) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # reported as a crash below
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.kill()
                return {"kind": "hang", "stage": "timeout", "type": "", "max_diff": None, "seconds": timeout,
                        "message": f"no answer within {timeout:.0f} s; stderr tail:\n{self._log_tail(offset)}",
                        "signature": "hang|timeout"}
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:  # the worker died
                code = self.proc.wait()
                tail = self._log_tail(offset)
                self.kill()
                from .errors import key_line, normalize

                how = f"signal {-code}" if code < 0 else f"exit {code}"
                return {"kind": "internal-error", "stage": "crash", "type": how, "max_diff": None, "seconds": 0.0,
                        "message": f"worker died ({how}); stderr tail:\n{tail}",
                        "signature": f"internal-error|crash|{how}|{normalize(key_line(tail.split('--- request')[-1]))}"}
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return json.loads(line)


class _Gate:
    """Shared for simulator cases, exclusive for MPI cases (they start N rank processes)."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.shared_count = 0
        self.exclusive_held = False

    @contextmanager
    def hold(self, exclusive: bool):
        with self.cond:
            if exclusive:
                self.cond.wait_for(lambda: not self.exclusive_held and self.shared_count == 0)
                self.exclusive_held = True
            else:
                self.cond.wait_for(lambda: not self.exclusive_held)
                self.shared_count += 1
        try:
            yield
        finally:
            with self.cond:
                if exclusive:
                    self.exclusive_held = False
                else:
                    self.shared_count -= 1
                self.cond.notify_all()


class Pool:
    """`jobs` workers; `map(requests, callback)` runs (key, request, timeout) items, calling
    `callback(key, request, outcome)` from worker threads (serialised by a lock)."""

    def __init__(self, jobs: int = 1, **worker_kwargs) -> None:
        self.workers = [Worker(**worker_kwargs) for _ in range(max(1, jobs))]
        self.gate = _Gate()
        self.lock = threading.Lock()

    def map(self, items, callback) -> None:
        work: queue.Queue = queue.Queue()
        for item in items:
            work.put(item)
        errors: list[BaseException] = []

        def loop(worker: Worker) -> None:
            while not errors:
                try:
                    key, req, timeout = work.get_nowait()
                except queue.Empty:
                    return
                try:
                    with self.gate.hold(bool(req.get("mpi"))):
                        outcome = worker.request(req, timeout)
                    with self.lock:
                        callback(key, req, outcome)
                except BaseException as exc:  # noqa: BLE001 - stop the whole run
                    errors.append(exc)

        threads = [threading.Thread(target=loop, args=(w,), daemon=True) for w in self.workers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]

    def request(self, req: dict, timeout: float) -> dict:
        return self.workers[0].request(req, timeout)

    def close(self) -> None:
        for w in self.workers:
            w.close()

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


if __name__ == "__main__":
    _serve()
