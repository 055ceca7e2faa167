"""Which of a device's reads miss its cache (`CacheClock`), for `Machine.op_time`'s two bandwidths.

The same optimizer kernel of a GPT training step runs much slower inside the step than alone, over and over
(benchmarks/README.md, "Figures behind the code"): there its parameters, moments and gradients were last touched
a whole forward and backward earlier, and come from memory, not from the cache. A bandwidth fitted to small
probes, all of whose data stays cached, prices such reads too fast.

The clock counts the bytes one device stores (each op's results, each collective's) and the bytes it reads from
memory; a read of a value is cold when more than `capacity` bytes (`Machine.cache_bytes`: the device's share of
the largest cache) went by since the value was last touched (made or read): an LRU cache's reuse distance,
counted in bytes. A program's arguments were last touched in the previous run: before their first read, the
distance counts every argument's bytes as well, so an argument is warm only in a program that fits in the cache
whole (the probes), as a steady stream of runs leaves it. Both the search's model (`cost_model._Run`) and the
compiled programs' price (`graph_cost.price_graph`) keep one.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable


class CacheClock:
    """One run's reuse distances on one device (see the module docstring). Keys name values (any hashable)."""

    __slots__ = ("capacity", "arguments", "touched", "last")

    def __init__(self, capacity: float, argument_bytes: int):
        self.capacity = capacity
        self.arguments = argument_bytes  # bytes touched since an argument's last touch in the previous run, at least
        self.touched = 0
        self.last: dict[Hashable, int] = {}

    @classmethod
    def of(cls, machine, argument_bytes: int) -> CacheClock | None:
        """The clock a run on `machine` (`Machine`) keeps; None where reads from memory cost what others do (its
        two bandwidths are one, as the built-in figures' are): nothing to tell apart, and the search saves the
        count."""
        if machine.memory_bandwidth == machine.bandwidth:
            return None
        return cls(machine.cache_bytes, argument_bytes)

    def made(self, key: Hashable, nbytes: int) -> None:
        """Value `key` is stored now (`nbytes` per device)."""
        self.touched += nbytes
        self.last[key] = self.touched

    def share(self, key: Hashable, source: Hashable) -> None:
        """Value `key` is read in place from `source`'s bytes (a slice, a view): it is as warm as they are."""
        seen = self.last.get(source)
        if seen is None:
            self.last.pop(key, None)
        else:
            self.last[key] = seen

    def read(self, keys: Iterable[Hashable | None], nbytes: Iterable[int]) -> int:
        """One op reads each value of `keys` (None: a copy made for it, in cache) over `nbytes` of it; the bytes
        among them that come from memory. Every value read is touched now."""
        cold = 0
        touched, last, capacity = self.touched, self.last, self.capacity
        for key, size in zip(keys, nbytes):
            if not size or key is None:
                continue
            seen = last.get(key)
            if (touched - seen if seen is not None else touched + self.arguments) > capacity:
                cold += size
            last[key] = touched
        self.touched += cold
        return cold
