"""The link between a job's driver and its ranks: TCP, so ranks on other hosts reach the driver as local ones do.

Every rank of a job the driver started (`rank_job.RankJob` serving `rank_server`) connects back to the driver;
programs, kernels' cache keys (and library bytes), batches, results and session requests all travel over these
connections (and over MPI between the ranks), never through a file system both would have to share.

The address is chosen by the driver. `SLICER_DRIVER_ADDRESS` = `HOST[:PORT]` names it: an address of the
driver's host the ranks can reach, a host name, or a network interface's name (`eth0`: its IPv4 address); the
port is any free one unless given (a firewall between the hosts then needs only that port open). Unset, the
driver listens on every interface and gives the ranks its addresses to try in turn (loopback first, for the
ranks on its own host): a rank tries them staggered, not one after another (`connect`), so an address its host
cannot reach (a bridge or private network of the driver's host only) costs it a quarter second, not the
connect timeout. Every connection is authenticated both ways with the job's key (HMAC challenges,
`multiprocessing.connection`'s), which the ranks get from mpiexec's environment (`SLICER_SESSION_KEY`); a
peer that does not answer the challenge within `HANDSHAKE_SECONDS` is dropped.
"""

from __future__ import annotations

import errno
import fcntl
import ipaddress
import os
import selectors
import socket
import struct
import time
from multiprocessing.connection import Connection, answer_challenge, deliver_challenge

from slicer.core import environment
from slicer.core.errors import LaunchError

ADDRESS_ENV = environment.DRIVER_ADDRESS.name
KEY_ENV = environment.SESSION_KEY.name
HANDSHAKE_SECONDS = 10  # a connecting peer answers the key's challenge within this, or is dropped
CONNECT_SECONDS = 5.0  # a rank's try of one of the driver's addresses
STAGGER_SECONDS = 0.25  # the next address is tried this long after the previous one, while that one is pending
_SIOCGIFADDR = 0x8915


def interface_address(name: str) -> str | None:
    """The IPv4 address of network interface `name` on this host, or None if there is no such interface."""
    if name not in {n for _, n in socket.if_nameindex()}:
        return None
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            packed = fcntl.ioctl(probe.fileno(), _SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
        except OSError:
            return None
    return socket.inet_ntoa(packed[20:24])


def local_addresses() -> list[str]:
    """This host's IPv4 addresses, loopback first."""
    found = [a for _, n in socket.if_nameindex() if (a := interface_address(n))]
    return sorted(set(found), key=lambda a: (not ipaddress.ip_address(a).is_loopback, a))


def listen_address(environ=None) -> tuple[str, int, list[str]]:
    """(address to bind, port, addresses the ranks try), from `SLICER_DRIVER_ADDRESS` (module docstring)."""
    value = (environment.value(environment.DRIVER_ADDRESS) if environ is None else environ.get(ADDRESS_ENV)) or ""
    value = value.strip()
    host, _, port_text = value.rpartition(":") if value.count(":") == 1 else (value, "", "")
    try:
        port = int(port_text) if port_text else 0
    except ValueError:
        raise LaunchError(f"{ADDRESS_ENV}={value!r}: give HOST or HOST:PORT (a number)") from None
    if not host:
        return "0.0.0.0", port, local_addresses() or ["127.0.0.1"]
    address = interface_address(host)
    if address is None:
        try:
            address = socket.gethostbyname(host)
        except OSError as exc:
            raise LaunchError(f"{ADDRESS_ENV}={value!r} is neither an interface of this host nor a name it can "
                              f"resolve: {exc}") from None
    return address, port, [address]


class Listener:
    """The driver's end: a TCP socket the ranks connect to (`address`: what they are told, `host:port,...`)."""

    def __init__(self, backlog: int):
        host, port, tries = listen_address()
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            self.socket.bind((host, port))
        except OSError as exc:
            self.socket.close()
            raise LaunchError(f"cannot listen for the ranks on {host}:{port} ({ADDRESS_ENV}): {exc}") from None
        self.socket.listen(backlog)
        port = self.socket.getsockname()[1]
        self.address = ",".join(f"{a}:{port}" for a in tries)

    def accept(self, key: bytes, timeout: float) -> Connection | None:
        """The next authenticated connection, or None if none came within `timeout` seconds (or the peer did
        not know the key)."""
        self.socket.settimeout(timeout)
        try:
            sock, _ = self.socket.accept()
        except TimeoutError:
            return None
        try:
            return _handshake(sock, key, first=True)
        except Exception:  # noqa: BLE001 - a peer without the key, or silent: dropped, the driver listens on
            return None

    def close(self) -> None:
        self.socket.close()


def _handshake(sock: socket.socket, key: bytes, *, first: bool) -> Connection:
    """Both ends prove they hold `key` (the driver challenges first); the connection, with Nagle off (the
    requests and heartbeats are small and waited for)."""
    sock.setblocking(True)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    limit = struct.pack("ll", HANDSHAKE_SECONDS, 0)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, limit)  # a silent peer cannot hold the accept loop
    connection = Connection(os.dup(sock.fileno()))  # the socket object keeps its own descriptor for setsockopt
    try:
        if first:
            deliver_challenge(connection, key)
            answer_challenge(connection, key)
        else:
            answer_challenge(connection, key)
            deliver_challenge(connection, key)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", 0, 0))
    except BaseException:
        connection.close()
        raise
    finally:
        sock.close()
    return connection


def _socket(key: selectors.SelectorKey) -> socket.socket:
    assert isinstance(key.fileobj, socket.socket)  # only sockets are registered
    return key.fileobj


def _connections(targets: list[tuple[str, int]], problems: list[str]):
    """Connected sockets to `targets`, in the order they connect: target i is tried once the one before it failed
    or after `STAGGER_SECONDS`, whichever comes first, each for at most `CONNECT_SECONDS` (as RFC 8305's "happy
    eyeballs": the first address still wins when it answers at once, a silent one delays the rest only by the
    stagger). What fails is said in `problems`; sockets still connecting when the caller stops are closed."""
    selector = selectors.DefaultSelector()
    queue, next_start = list(targets), time.monotonic()
    try:
        while queue or selector.get_map():
            now = time.monotonic()
            if queue and (now >= next_start or not selector.get_map()):
                host, port = queue.pop(0)
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sock.setblocking(False)
                code = sock.connect_ex((host, port))
                if code not in (0, errno.EINPROGRESS):
                    problems.append(f"{host}:{port}: {os.strerror(code)}")
                    sock.close()
                    continue
                selector.register(sock, selectors.EVENT_WRITE, (f"{host}:{port}", now + CONNECT_SECONDS))
                next_start = now + STAGGER_SECONDS
                continue
            expiry = min(data[1] for data in (k.data for k in selector.get_map().values()))
            wait = min(expiry, next_start) if queue else expiry
            for key, _ in selector.select(max(0.0, wait - now)):
                sock, (address, _) = _socket(key), key.data
                selector.unregister(sock)
                code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if code:
                    problems.append(f"{address}: {os.strerror(code)}")
                    sock.close()
                else:
                    yield sock, address
            now = time.monotonic()
            for key in [k for k in selector.get_map().values() if k.data[1] <= now]:
                selector.unregister(key.fileobj)
                _socket(key).close()
                problems.append(f"{key.data[0]}: no answer within {CONNECT_SECONDS:g} s")
    finally:
        for key in list(selector.get_map().values()):
            _socket(key).close()
        selector.close()


def connect(addresses: str, key: bytes, *, rank: int) -> Connection:
    """A rank's connection to its driver: the first of `addresses` (`host:port,...`, tried as `_connections`
    says) that answers with the key."""
    problems: list[str] = []
    targets = [(host, int(port)) for host, _, port in (a.rpartition(":") for a in addresses.split(","))]
    candidates = _connections(targets, problems)
    try:
        for sock, address in candidates:
            try:
                return _handshake(sock, key, first=False)
            except Exception as exc:  # noqa: BLE001 - another listener on that address: try the next
                problems.append(f"{address}: {type(exc).__name__}: {exc}")
    finally:
        candidates.close()
    raise LaunchError(f"rank {rank} on host {socket.gethostname()} cannot reach the driver ({'; '.join(problems)}): "
                      f"set {ADDRESS_ENV} to an address (or interface) of the driver's host that every host of the "
                      "job can reach")


__all__ = ["ADDRESS_ENV", "KEY_ENV", "Listener", "connect", "interface_address", "listen_address",
           "local_addresses"]
