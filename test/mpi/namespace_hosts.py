"""Two "hosts" on one machine that share what two machines share, and nothing else: the network between them.
Used by test_multihost.py and benchmarks/multihost.py; needs root.

`two_hosts()` makes two network namespaces joined by a veth pair (the interface `slicer0` in both, private
addresses 10.213.0.1 and .2: nothing else is contacted), and a wrapper used as `mpiexec`: MPICH's hydra with
`-hosts <h1>:2,<h2>:2 -launcher ssh -launcher-exec <script>`, hydra itself and the script's proxies each in their
host's namespaces (`HOST`): a hostname, pid namespace and boot id of its own (MPI's shared-memory split, Slicer's
shared-memory collectives and UCX see two nodes, so the collectives between the hosts go over the veth pair)
and a mount namespace with its own empty tmpfs on /tmp, /dev/shm and the kernel cache directory: a rank finds
nothing the driver or the other host wrote, and the second host receives its kernels' libraries from the
driver (same CPU) instead of finding them. The driver (the calling process) joins the first host's network
namespace (`setns`, the calling thread) and listens on `slicer0` (`SLICER_DRIVER_ADDRESS`): ranks 0-1 (host a)
and 2-3 (host b) reach it over the network. Each end of the pair sends at most 1 Gbit/s (`tc` token bucket), as
Ethernet between two machines would. Everything is undone on leaving, whatever happens.
"""

import contextlib
import ctypes
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from slicer.lowering.cache import default_cache_dir
from slicer.runtime.jobs import rank_pool
from slicer.runtime.jobs.mpiexec import find_mpiexec
from slicer.runtime.jobs.rank_link import ADDRESS_ENV

ROOT = Path(__file__).resolve().parents[2]
HOSTS = ("10.213.0.1", "10.213.0.2")
IFACE = "slicer0"
CLONE_NEWNET = 0x40000000
LINK_RATE = "1gbit"
# A host's own namespaces beside its network: hostname (MPI groups ranks into nodes by it), mounts and process
# ids; and its own boot id: UCX (MPICH's network layer here) tells machines apart by it, and with one for both
# "hosts" it moved the bytes between them through shared memory, never over the veth pair. When the host's first
# process ends, every process of the host ends with it (its pid namespace's init), as a machine's would.
HOST = "unshare --uts --mount --pid --fork --kill-child --mount-proc sh -c"
OWN_FILES = ("{keep_open}mount -t tmpfs tmpfs /tmp && {keep_mount}mount -t tmpfs tmpfs /dev/shm && "
             "mount -t tmpfs tmpfs {cache} && cat /proc/sys/kernel/random/uuid > /tmp/boot_id && "
             "mount --bind /tmp/boot_id /proc/sys/kernel/random/boot_id")


def _kept_under_tmp() -> list[Path]:
    """The folders under /tmp a host's ranks need (the checkout, the venv) and that its fresh /tmp would hide: a
    checkout cloned into /tmp, as a CI job may. Each is opened before /tmp is mounted afresh and bound back to its
    path after, as a shared file system a machine mounts where its peer has it."""
    tmp = Path("/tmp")
    found: list[Path] = []
    for path in sorted({ROOT.resolve(), Path(sys.prefix).resolve()}):
        if path.is_relative_to(tmp) and not any(path.is_relative_to(kept) for kept in found):
            found.append(path)
    return found


def _own_files(cache: Path) -> str:
    kept = _kept_under_tmp()
    keep_open = "".join(f"exec {9 - i}<{path} && " for i, path in enumerate(kept))
    keep_mount = "".join(f"mkdir -p {path} && mount --no-canonicalize --bind /proc/self/fd/{9 - i} {path} && "
                         for i, path in enumerate(kept))
    return OWN_FILES.format(keep_open=keep_open, keep_mount=keep_mount, cache=cache)


def _ip(*args) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    if shutil.which("ip") is None or shutil.which("unshare") is None or shutil.which("tc") is None:
        return "needs iproute2's `ip` and `tc`, and util-linux's `unshare`"
    return None


def _setns(path: str) -> None:
    """This thread into the network namespace at `path`."""
    fd = os.open(path, os.O_RDONLY)
    try:
        if ctypes.CDLL(None, use_errno=True).setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {path}")
    finally:
        os.close(fd)


class TwoHosts:
    """The namespaces, their veth pair and the mpiexec wrapper (see the module docstring)."""

    def __init__(self, directory: Path):
        tag = f"{os.getpid() % 100000}"
        self.namespaces = (f"slicer-mh{tag}a", f"slicer-mh{tag}b")
        self.directory = directory
        self.log = directory / "launches.log"

    def create(self) -> None:
        a, b = self.namespaces
        va, vb = f"smh{a[9:-1]}a", f"smh{a[9:-1]}b"
        for args in (["netns", "add", a], ["netns", "add", b], ["link", "add", va, "type", "veth", "peer", "name", vb],
                     ["link", "set", va, "netns", a], ["link", "set", vb, "netns", b],
                     ["-n", a, "link", "set", va, "name", IFACE], ["-n", b, "link", "set", vb, "name", IFACE],
                     ["-n", a, "addr", "add", f"{HOSTS[0]}/24", "dev", IFACE],
                     ["-n", b, "addr", "add", f"{HOSTS[1]}/24", "dev", IFACE],
                     *[["-n", ns, "link", "set", dev, "up"] for ns in (a, b) for dev in ("lo", IFACE)]):
            done = _ip(*args)
            if done.returncode != 0:
                raise OSError(f"ip {' '.join(args)}: {done.stderr.strip()}")
        # Each end sends at most 1 Gbit/s (a token bucket), as Ethernet between two machines: unshaped, a veth
        # pair on one machine moves bytes at the speed of memory, as shared memory does.
        self.shaped = all(subprocess.run(["tc", "-n", ns, "qdisc", "add", "dev", IFACE, "root", "tbf", "rate",
                                          LINK_RATE, "burst", "128kb", "latency", "100ms"],
                                         capture_output=True).returncode == 0 for ns in (a, b))
        launcher = self.directory / "netns-launcher.sh"
        cache = default_cache_dir()  # each host mounts its own (empty) one there
        cache.mkdir(parents=True, exist_ok=True)
        launcher.write_text(
            "#!/bin/sh\n# hydra's ssh launcher calls: [options] host command...: run the command on that host\n"
            'while [ $# -gt 0 ]; do case "$1" in -*) shift;; *) break;; esac; done\n'
            'host=$1; shift\n'
            f'case "$host" in {HOSTS[0]}) ns={a};; {HOSTS[1]}) ns={b};; *) echo "unknown host $host" >&2; '
            'exit 2;; esac\n'
            f'echo "$host $ns" >> {self.log}\n'
            # its own hostname (MPI groups ranks into nodes by it), its own /tmp, /dev/shm and kernel cache
            f'exec ip netns exec "$ns" {HOST} "hostname $ns && {_own_files(cache)} && $*"\n')
        self.mpiexec = self.directory / "mpiexec"
        # hydra itself runs on the first host (which then starts its proxy there without the launcher)
        self.mpiexec.write_text(
            f"#!/bin/sh\nexec ip netns exec {a} {HOST} 'hostname {a} && {_own_files(cache)} && exec "
            f"{find_mpiexec()} -hosts {HOSTS[0]}:2,{HOSTS[1]}:2 -launcher ssh -launcher-exec {launcher} -iface {IFACE} "
            '"$@"\' host "$@"\n')
        for script in (launcher, self.mpiexec):
            script.chmod(0o755)

    def remove(self) -> None:
        for ns in self.namespaces:  # removing a namespace removes its end of the veth pair, hence the pair
            _ip("netns", "del", ns)

    def bytes_sent(self) -> int:
        """Bytes the first host sent over the pair."""
        done = _ip("-n", self.namespaces[0], "-s", "-j", "link", "show", IFACE)
        return int(json.loads(done.stdout)[0]["stats64"]["tx"]["bytes"])

    def processes(self) -> dict[str, list[str]]:
        """The processes in each host's namespace (their command lines), but this one (the driver, which joined
        the first's)."""
        found = {}
        for ns in self.namespaces:
            pids = [int(p) for p in _ip("netns", "pids", ns).stdout.split()]
            # (the `ip` listing them, started from this thread, is in the first namespace too: gone by now)
            found[ns] = [c for c in map(_command, pids) if c and not c.startswith(f"{os.getpid()}:")]
        return found

    def hosts_launched(self) -> set[str]:
        return set(self.log.read_text().split()) if self.log.exists() else set()


def _command(pid: int) -> str | None:
    """`pid: command line` of a running process, None if it is gone."""
    try:
        return f"{pid}: " + Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:200]
    except OSError:
        return None


class Unavailable(Exception):
    """The two hosts cannot be made here (the reason)."""


@contextlib.contextmanager
def two_hosts():
    """The two hosts (a `TwoHosts`), this thread in the first's network, the driver listening on `slicer0`;
    raises `Unavailable` where they cannot be made."""
    reason = _why_not()
    if reason:
        raise Unavailable(reason)
    # the scripts where the hosts see them: not in /tmp, which each host mounts afresh
    directory = ROOT / "build" / f"multihost-{os.getpid()}"
    directory.mkdir(parents=True, exist_ok=True)
    hosts = TwoHosts(directory)
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    before = os.environ.get(ADDRESS_ENV)
    try:
        try:
            hosts.create()
            _setns(f"/var/run/netns/{hosts.namespaces[0]}")
        except OSError as exc:  # root in a container without CAP_NET_ADMIN / CAP_SYS_ADMIN: nothing to test on
            raise Unavailable(f"network namespaces are not available here: {exc}") from None
        os.environ[ADDRESS_ENV] = IFACE  # an interface's name: the driver listens on its address
        yield hosts
    finally:
        rank_pool.close_all()  # a kept job on these hosts
        if before is None:
            os.environ.pop(ADDRESS_ENV, None)
        else:
            os.environ[ADDRESS_ENV] = before
        if ctypes.CDLL(None, use_errno=True).setns(home, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "setns back")
        os.close(home)
        hosts.remove()
        shutil.rmtree(directory, ignore_errors=True)
        left = [ns for ns in hosts.namespaces if ns in _ip("netns", "list").stdout]
        if left:
            raise RuntimeError(f"network namespaces left behind: {left}")
