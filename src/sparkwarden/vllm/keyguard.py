"""Whether an API key may go to the port an engine (or the gateway) is reached on: the key is
sent only to a listener proven to be the engine's, so that a local user who binds the port
first (an unprivileged port with host networking, while the engine loads) is not handed it.

A listener is trusted when it is root's (only root makes a socket owned by uid 0: a root engine,
Docker's ``docker-proxy`` for a published port), when its port is privileged (binding it needs
``CAP_NET_BIND_SERVICE``), or when one of the engine containers' own processes holds it (seen
in ``/proc``: its cgroup names the container). Root can read the key file anyway, so a root
listener learns nothing new. A URL naming another host is not checked: no local user can sit
on its port.
"""

from __future__ import annotations

import ipaddress
import socket
import urllib.parse
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from sparkwarden.adapters import listeners as host_listeners
from sparkwarden.adapters.docker_engine import DockerEngine
from sparkwarden.adapters.listeners import Listener
from sparkwarden.base.errors import SparkwardenError


class KeyWithheld(Exception):
    """The listener on the port is not proven the engine's: the keyed request is not sent."""


@dataclass(frozen=True)
class Engines:
    """What Docker says of the containers that may hold the port: their IDs, and the host ports
    they publish (Docker carries those itself, with or without a ``docker-proxy`` listener)."""

    ids: tuple[str, ...] = ()
    published: frozenset[int] = frozenset()


def docker_engines(docker: DockerEngine, names: Sequence[str]) -> Callable[[], Engines]:
    """The engines as Docker sees them at each ask: the running ones' IDs and published ports
    (an unreachable Docker proves nothing, so only root's listeners then pass)."""

    def engines() -> Engines:
        ids, published = [], set()
        for name in names:
            try:
                attrs = docker.attrs(name)
            except SparkwardenError:
                continue
            if attrs.get("State", {}).get("Running"):
                ids.append(str(attrs.get("Id", "")))
            ports = (attrs.get("NetworkSettings") or {}).get("Ports") or {}
            for bindings in ports.values():
                for binding in bindings or ():
                    if str(binding.get("HostPort", "")).isdigit():
                        published.add(int(binding["HostPort"]))
        return Engines(tuple(ids), frozenset(published))

    return engines


def verdict(
    port: int,
    listening: list[Listener],
    privileged_below: int,
    engines: Callable[[], Engines],
    owned: Callable[[Engines], set[int]],
) -> str | None:
    """None when every socket that can take the connection is proven the engine's; otherwise
    why the key is withheld. Docker (``engines``) and /proc (``owned``: the engines' socket
    inodes) are asked only when root's ownership or a privileged port does not settle it."""
    if not listening:
        if port in engines().published:
            return None  # Docker forwards it (userland-proxy off: no host socket to check)
        return f"nothing listens on port {port}: the API key is withheld"
    if port < privileged_below:
        return None
    strangers = [entry for entry in listening if entry.uid != 0]
    if not strangers:
        return None
    inodes = owned(engines())
    for entry in strangers:
        if entry.inode not in inodes:
            return (
                f"{entry.address}:{port} is held by uid {entry.uid}, not by root or an engine "
                f"container's process: the API key is withheld"
            )
    return None


def _matching(listening: Iterable[Listener], addresses: set[str]) -> list[Listener]:
    """The sockets a connection to one of ``addresses`` can reach: bound to it or to any."""
    return [entry for entry in listening if entry.address in addresses or entry.wildcard]


class KeyGuard:
    """Asked before each keyed request: a listener can change whenever the engine restarts, and
    reading ``/proc/net/tcp`` (tens of milliseconds on the test VM) is small next to the chat
    request it guards."""

    def __init__(
        self,
        base_url: str,
        engines: Callable[[], Engines] = Engines,
        proc: Path = Path("/proc"),
    ) -> None:
        url = urllib.parse.urlsplit(base_url)
        self.host = url.hostname or ""
        self.port = url.port or (443 if url.scheme == "https" else 80)
        self._engines = engines
        self._proc = proc

    def addresses(self) -> set[str] | None:
        """The local addresses the URL names; None when it names another host."""
        if not host_listeners.is_local_address(self.host):
            return None
        try:
            infos = socket.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)
        except OSError:
            return None
        found = set()
        for *_, sockaddr in infos:
            address = ipaddress.ip_address(str(sockaddr[0]).split("%")[0])
            mapped = getattr(address, "ipv4_mapped", None)
            found.add(str(mapped or address))
        return found

    def refusal(self) -> str | None:
        """None when the key may go; otherwise why not, in words fit for a failed probe."""
        addresses = self.addresses()
        if addresses is None:
            return None
        listening = _matching(host_listeners.tcp_listeners(self.port, self._proc), addresses)

        def owned(engines: Engines) -> set[int]:
            inodes: set[int] = set()
            for container_id in engines.ids:
                inodes |= host_listeners.container_socket_inodes(container_id, self._proc)
            return inodes

        return verdict(
            self.port,
            listening,
            host_listeners.unprivileged_port_start(self._proc),
            self._engines,
            owned,
        )
