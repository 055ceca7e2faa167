"""The driver's link to its ranks (`runtime.jobs.rank_link`) and the per-host checks of a job's ranks
(`resources.check_hosts`), in one process: a rank thread connects with the job's key and is refused without
it; `SLICER_DRIVER_ADDRESS` names an address, an interface or a port; each host's ranks are counted against
its own cores and memory."""

import socket
import threading
import time

import pytest

from slicer.core.errors import LaunchError, ResourceError
from slicer.runtime.jobs import rank_link
from slicer.runtime.jobs.resources import HostReport, check_hosts


def test_a_rank_connects_with_the_key_and_a_stranger_does_not(monkeypatch):
    monkeypatch.setenv(rank_link.ADDRESS_ENV, "127.0.0.1")
    listener = rank_link.Listener(2)
    key = b"k" * 32
    try:
        assert listener.address.startswith("127.0.0.1:")
        got = {}
        rank = threading.Thread(target=lambda: got.setdefault("c", rank_link.connect(listener.address, key, rank=0)))
        rank.start()
        driver = listener.accept(key, 10)
        rank.join(10)
        driver.send(("ping", 1))
        assert got["c"].recv() == ("ping", 1)
        outcome = {}

        def stranger():
            try:
                outcome["it"] = rank_link.connect(listener.address, b"x" * 32, rank=1)
            except LaunchError as exc:
                outcome["it"] = str(exc)

        thread = threading.Thread(target=stranger)
        thread.start()
        assert listener.accept(key, 10) is None  # dropped; the driver listens on
        thread.join(10)
        assert "rank 1 on host" in outcome["it"] and "cannot reach the driver" in outcome["it"]
    finally:
        listener.close()


def test_the_driver_address_names_an_interface_an_address_or_a_port(monkeypatch):
    monkeypatch.setenv(rank_link.ADDRESS_ENV, "lo:40123")
    assert rank_link.listen_address() == ("127.0.0.1", 40123, ["127.0.0.1"])
    monkeypatch.setenv(rank_link.ADDRESS_ENV, "localhost")
    assert rank_link.listen_address()[0] == "127.0.0.1"
    monkeypatch.delenv(rank_link.ADDRESS_ENV)
    host, port, tries = rank_link.listen_address()
    assert (host, port) == ("0.0.0.0", 0) and tries[0] == "127.0.0.1"
    monkeypatch.setenv(rank_link.ADDRESS_ENV, "no-such-host.invalid")
    with pytest.raises(LaunchError, match="neither an interface"):
        rank_link.listen_address()


def test_ranks_are_counted_against_the_cores_of_their_own_host(monkeypatch):
    monkeypatch.delenv("SLICER_OVERSUBSCRIBE", raising=False)
    a, b = HostReport("a", 2, None), HostReport("b", 1, None)
    check_hosts([a, a, HostReport("b", 2, None), HostReport("b", 2, None)])  # 2 + 2 on hosts of 2 cores each
    with pytest.raises(ResourceError, match=r"2 ranks \(ranks 2, 3\) on host b's 1 cores"):
        check_hosts([a, a, b, b])
    check_hosts([a, a, b, b], oversubscribe=True)


def test_an_address_that_does_not_answer_costs_a_rank_a_stagger_not_the_connect_timeout(monkeypatch):
    """The driver's addresses, unset `SLICER_DRIVER_ADDRESS`, include some another host cannot reach (a bridge of
    the driver's host): their connects hang. A listener whose backlog is full stands for one (Linux drops the SYNs
    it cannot queue); listed first, it delays the rank by the stagger, not by `CONNECT_SECONDS`."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(0)
    fillers = []
    monkeypatch.setenv(rank_link.ADDRESS_ENV, "127.0.0.1")
    listener = rank_link.Listener(2)
    key = b"k" * 32
    try:
        for _ in range(4):  # fill the backlog: later connects get no answer
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex(silent.getsockname())
            fillers.append(filler)
        time.sleep(0.1)
        probe = socket.socket()
        probe.settimeout(0.5)
        with pytest.raises(TimeoutError):  # the silent address is silent
            probe.connect(silent.getsockname())
        probe.close()
        address = f"127.0.0.1:{silent.getsockname()[1]},{listener.address}"
        got = {}
        start = time.monotonic()
        rank = threading.Thread(target=lambda: got.setdefault("c", rank_link.connect(address, key, rank=0)))
        rank.start()
        driver = listener.accept(key, 10)
        rank.join(10)
        took = time.monotonic() - start
        assert driver is not None and "c" in got
        assert took < rank_link.CONNECT_SECONDS / 2, took
    finally:
        for sock in (*fillers, silent):
            sock.close()
        listener.close()
