"""Who holds a TCP port on this host: the listening sockets (``/proc/net/tcp``, ``tcp6``) with
their owner's uid and inode, and the socket inodes a container's processes hold.

Read before an API key is sent, so that a local user who binds the engine's port first (an
unprivileged port, with host networking) is not handed the key. ``/proc/net/tcp`` is readable by
anyone; a process's ``fd`` table only by root and only when ``/proc`` shows the process (the
shipped unit's ``ProtectProc=invisible`` hides other users' processes, so there the uid is what
tells).
"""

from __future__ import annotations

import ipaddress
import os
import socket
from dataclasses import dataclass
from pathlib import Path

_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's "st" column


@dataclass(frozen=True)
class Listener:
    """One listening socket: the address it is bound to, its owner and its inode."""

    address: str
    port: int
    uid: int
    inode: int

    @property
    def wildcard(self) -> bool:
        return ipaddress.ip_address(self.address).is_unspecified


def _address(hex_address: str) -> str:
    """``/proc/net/tcp``'s address: 32-bit words in host byte order (little-endian here)."""
    raw = bytes.fromhex(hex_address)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    address = ipaddress.ip_address(words)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


def parse_proc_net_tcp(text: str, port: int | None = None) -> list[Listener]:
    """The listening sockets in one ``/proc/net/tcp`` or ``tcp6`` table (on ``port`` only, when
    given: a busy engine's table has a line per client connection)."""
    wanted = None if port is None else f":{port:04X}"
    found = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10 or fields[3] != _LISTEN:
            continue
        if wanted is not None and not fields[1].endswith(wanted):
            continue
        hex_address, _, hex_port = fields[1].partition(":")
        found.append(
            Listener(_address(hex_address), int(hex_port, 16), int(fields[7]), int(fields[9]))
        )
    return found


def tcp_listeners(port: int, proc: Path = Path("/proc")) -> list[Listener]:
    """Every socket listening on ``port``, IPv4 and IPv6."""
    found: list[Listener] = []
    for table in ("tcp", "tcp6"):
        try:
            text = (proc / "net" / table).read_text()
        except OSError:  # no IPv6 in this kernel
            continue
        found += parse_proc_net_tcp(text, port)
    return found


def container_socket_inodes(container_id: str, proc: Path = Path("/proc")) -> set[int]:
    """The socket inodes held by processes whose cgroup names ``container_id`` (the form both
    Docker cgroup drivers use: ``/docker/<id>`` and ``docker-<id>.scope``). Empty when /proc hides
    them (another user's processes under ``ProtectProc=invisible``)."""
    if len(container_id) < 12:
        return set()
    inodes: set[int] = set()
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if container_id not in (entry / "cgroup").read_text():
                continue
            for fd in (entry / "fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(int(target[8:-1]))
        except OSError:  # gone, or not ours to read
            continue
    return inodes


def unprivileged_port_start(proc: Path = Path("/proc")) -> int:
    """Ports from here up may be bound by any user (``net.ipv4.ip_unprivileged_port_start``)."""
    try:
        return int((proc / "sys/net/ipv4/ip_unprivileged_port_start").read_text())
    except (OSError, ValueError):
        return 1024


def is_local_address(host: str) -> bool:
    """Whether ``host`` names an address of this host (loopback or an interface's): only then
    can a local user sit on its port. Binding port 0 succeeds exactly for local addresses."""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return False
    for family, _, _, _, sockaddr in infos:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((sockaddr[0], 0))
            except OSError:
                continue
            return True
    return False
