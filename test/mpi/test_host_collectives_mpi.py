"""The all_reduce and all_gather in two levels (`runtime.host_collectives`: shared memory within a host, MPI
across hosts) on one machine, its two hosts simulated: equal to the flat MPI collectives and the simulator (bit for
bit on exact data, to rounding on random float sums; gathers bit for bit), chosen only for groups with several
members on each host. The same worker runs on two real (namespace) hosts in test_multihost.py."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from test_redistribution_mpi import run_workers

WORKER = Path(__file__).with_name("host_collectives_worker.py")


def test_collectives_in_two_levels_equal_the_flat_ones_on_simulated_hosts():
    proc = run_workers(4, [str(WORKER)], timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["cases"] == 168 and not report["failures"], report["failures"]
    # both axes: two members on each host, in two levels; x alone: one member per host, flat
    assert report["levels"] == {f"{hosts} {axes}": both for hosts in ("(0, 0, 1, 1)", "(0, 1, 0, 1)")
                                for axes, both in (("('x', 'y')", True), ("('y', 'x')", True), ("('x',)", False),
                                                   ("('x', 'y') all_gather", True), ("('x',) all_gather", False))}
