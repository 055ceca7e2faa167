"""The search's descents run side by side in forked processes (`automatic/parallel.py`): the answers are the ones
run one after another, in order; the tilings the children priced join the cache (as figures, re-priced in full
when the chosen tiling needs its collectives); a child that dies has its tasks run by the parent; and the
setting that limits the processes is checked."""

import multiprocessing
import os
import time

import pytest
from test_composed import mlp_on_2x2

from slicer.automatic import TacticSearch, descent, parallel, read_sketch
from slicer.core.errors import AutoError

CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
needs_two_cores = pytest.mark.skipif(CORES < 2 or not hasattr(os, "fork"), reason="one core, or no os.fork")


@pytest.fixture(autouse=True)
def forking_allowed(monkeypatch):
    """The suite's in-process MPI tests may have initialised MPI in this worker before, where the search does not
    fork (`parallel._mpi_initialised`, tested below); the children here never call MPI."""
    monkeypatch.setattr(parallel, "_mpi_initialised", lambda: False)


class ChildTakes:
    """Makes sure a forked child takes a task, however loaded the machine: this process's tasks wait (up to 60 s)
    until a child has begun one (an Event in shared memory, inherited by the fork)."""

    def __init__(self):
        self.parent, self.event = os.getpid(), multiprocessing.get_context("fork").Event()

    def in_child(self) -> bool:
        if os.getpid() != self.parent:
            self.event.set()
            return True
        assert self.event.wait(60), "no forked child began a task within 60 s"
        return False


def _task(index: int, cache: dict, taken: ChildTakes):
    def run():
        taken.in_child()
        cache[("priced", index)] = {"by": os.getpid(), "detail": list(range(index))}
        return index, os.getpid()
    return run


@needs_two_cores
def test_tasks_run_in_children_answer_in_order_and_fill_the_cache():
    cache: dict = {}
    taken = ChildTakes()
    tasks = [_task(i, cache, taken) for i in range(12)]
    results = parallel.run_tasks(tasks, cache, seconds_per_task=1.0,
                                 compact=lambda entry: {"by": entry["by"]})  # the detail is not sent back
    assert [index for index, _ in results] == list(range(12))
    children = {pid for _, pid in results} - {os.getpid()}
    assert children, "no task ran in a forked process"
    assert set(cache) == {("priced", i) for i in range(12)}
    for index, pid in results:
        entry = cache[("priced", index)]
        assert entry["by"] == pid
        assert ("detail" in entry) == (pid == os.getpid())


def test_small_tasks_and_the_setting_keep_the_work_in_this_process(monkeypatch):
    tasks = [lambda: os.getpid() for _ in range(4)]
    assert parallel.run_tasks(tasks, {}, seconds_per_task=parallel.MIN_SECONDS / 10) == [os.getpid()] * 4
    monkeypatch.setenv(parallel.PROCESSES_ENV, "1")
    assert parallel.run_tasks(tasks, {}, seconds_per_task=1.0) == [os.getpid()] * 4


def test_a_process_with_mpi_initialised_does_not_fork(monkeypatch):
    monkeypatch.setattr(parallel, "_mpi_initialised", lambda: True)
    assert parallel.processes(4, 1.0) == 1


@pytest.mark.parametrize("value", ["two", "0", "-1", "1.5"])
def test_a_bad_process_count_is_refused(monkeypatch, value):
    monkeypatch.setenv(parallel.PROCESSES_ENV, value)
    for tasks, seconds in ((4, 1.0), (1, 0.0)):  # refused even where the search would not fork
        with pytest.raises(AutoError, match=parallel.PROCESSES_ENV):
            parallel.processes(tasks, seconds)


@needs_two_cores
@pytest.mark.slow
def test_the_search_chooses_the_same_in_parallel_as_in_one_process(monkeypatch):
    _, _, program, mesh, _ = mlp_on_2x2()
    sketch = read_sketch(program.text, program.entry, program.arg_names, program.result_names)

    def searched(processes: str):
        monkeypatch.setenv(parallel.PROCESSES_ENV, processes)
        search = TacticSearch(sketch, mesh, budget=540_000)
        return search, *search.run(refuse=False)

    monkeypatch.setattr(parallel, "MIN_SECONDS", 0.0)  # this small search would not pay for a fork
    alone, alone_choice, alone_est = searched("1")
    real_run_tasks = parallel.run_tasks

    def with_a_child(tasks, cache, seconds, **options):
        """The search's own tasks, this process's waiting until a child began one (the descents of this small
        search are quick enough for this process to take them all on a loaded machine)."""
        if parallel.processes(len(tasks), seconds) == 1:
            return real_run_tasks(tasks, cache, seconds, **options)
        taken = ChildTakes()
        return real_run_tasks([lambda task=task: (taken.in_child(), task())[1] for task in tasks], cache, seconds,
                              **options)

    monkeypatch.setattr(descent, "run_tasks", with_a_child)
    forked, forked_choice, forked_est = searched("2")
    assert forked_choice == alone_choice and forked_est == alone_est  # the chosen estimate in full
    assert forked_est.collectives  # re-priced here if a child had priced it
    assert set(forked.cache) == set(alone.cache)
    for key, est in alone.cache.items():
        other = forked.cache[key]
        assert (other is None) == (est is None)
        if est is not None:
            assert (other.compute, other.exposed, other.overlapped, other.peak_bytes) == \
                (est.compute, est.exposed, est.overlapped, est.peak_bytes), key
    assert any(e is not None and e.collectives is None for e in forked.cache.values()), "no tiling priced by a child"


@needs_two_cores
@pytest.mark.parametrize("failure", ["dies", "hangs"])
def test_a_child_that_dies_or_hangs_has_its_tasks_run_here(monkeypatch, failure):
    """A child that dies is reaped; one that hangs is killed once this process has waited long enough."""
    monkeypatch.setattr(parallel, "WAIT_SECONDS", 0.5)
    taken = ChildTakes()

    def fails_in_a_child(index):
        def run():
            if taken.in_child() and failure == "dies":
                os._exit(3)
            if os.getpid() != taken.parent:
                time.sleep(3600)
            return index
        return run

    started = time.perf_counter()
    assert parallel.run_tasks([fails_in_a_child(i) for i in range(6)], {}, seconds_per_task=1.0) == list(range(6))
    assert time.perf_counter() - started < 30


@needs_two_cores
@pytest.mark.slow
def test_garbage_holding_an_mlir_context_does_not_hang_a_child():
    """A child collecting the parent's cyclic garbage destroyed an MLIR context there, whose destructor waits for
    LLVM threads a forked process does not have (a hang); children collect nothing."""
    from mlir import ir
    from mlir.passmanager import PassManager

    context = ir.Context()  # its LLVM thread pool started by a pass run on two functions at once
    with context:
        module = ir.Module.parse(TWO_FUNCTIONS)
        PassManager.parse("builtin.module(func.func(canonicalize))").run(module.operation)
    cycle = [context, module]
    cycle.append(cycle)  # garbage for the collector only
    del cycle, context, module
    taken = ChildTakes()

    def allocates(index):
        def run():
            in_child = taken.in_child()
            junk = [[i] for i in range(200_000)]  # enough new containers to start an automatic collection
            return index, in_child and len(junk)
        return run

    results = parallel.run_tasks([allocates(i) for i in range(6)], {}, seconds_per_task=1.0)
    assert [index for index, _ in results] == list(range(6))
    assert any(in_child for _, in_child in results), "no task ran (to the end) in a child"


TWO_FUNCTIONS = """
func.func @f(%a: f32) -> f32 {
  %r = arith.addf %a, %a : f32
  return %r : f32
}
func.func @g(%a: f32) -> f32 {
  %r = arith.mulf %a, %a : f32
  return %r : f32
}
"""
