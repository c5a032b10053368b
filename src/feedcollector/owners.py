"""Who holds a lease: the owner string a collector process writes into ``lease_owner``.

An owner reads ``host:pid@space:nonce`` (``web1:2817@5e1f0a9b:c0ffee12``): the host name, the
process id, the *space* that pid is a number of, and a random nonce per collector (one
process may open several). The space is 8 hex digits of a hash of the kernel's boot id and
the inode of the process's pid namespace (Linux), so two containers sharing a host name (host
network, a fixed ``hostname:``), or two machines of one name, or two boots of one machine, are
told apart: a pid means something only in the space it was taken in.

:func:`owner_has_stopped` judges only owners of this host name *and* this space: their
process is gone when no process has their pid here (or when the pid is this very process's,
which did not make that owner: a restarted container's collector often gets the pid its
predecessor had). Any other owner may be alive, out of sight; its leases run out. Where the
boot id or the pid namespace cannot be read on Linux, the space is random per process (this
process judges no other); systems without pid namespaces use ``0`` (the pid is judged as
it always was there).

Owners written before the space was added, ``host:pid:nonce``, are never judged stopped:
whether their pid was one of this space cannot be known (a collector of another container of
the same host name, still running, looked dead and its feeds were fetched twice). A collector
killed before an upgrade leaves its leases to run out, once (15 minutes for a feed's). The
``@`` also keeps collectors of those versions from judging the new owners (their pid is not a
number to them), so mixed versions never take each other's leases.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import socket
import sys
import uuid
from functools import cache
from pathlib import Path

BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
PID_NAMESPACE = Path("/proc/self/ns/pid")
NO_NAMESPACES = "0"
"""The space of a system without pid namespaces (not Linux): one per host name, as before."""

_made_here: set[str] = set()
"""The owners this process made (:func:`new_owner`): the others of its own pid are gone."""


@cache
def process_space() -> str:
    """This process's space (see the module): the same for every process of one pid
    namespace of one boot, different for another namespace or boot."""
    if sys.platform != "linux":
        return NO_NAMESPACES
    return space_of(_read_boot_id(), _read_namespace())


def space_of(boot_id: str | None, namespace: int | None) -> str:
    """The space of a boot id and a pid namespace's inode; random when either is unknown."""
    if not boot_id or namespace is None:
        return secrets.token_hex(4)
    return hashlib.sha256(f"{boot_id}/{namespace}".encode()).hexdigest()[:8]


def _read_boot_id() -> str | None:
    try:
        return BOOT_ID.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None


def _read_namespace() -> int | None:
    try:
        return PID_NAMESPACE.stat().st_ino
    except OSError:
        return None


def owner_name(pid: int, nonce: str) -> str:
    """The owner of process ``pid`` of this host and space (a collector's own, or a test's)."""
    return f"{socket.gethostname()}:{pid}@{process_space()}:{nonce}"


def new_owner() -> str:
    """A new owner of this process, for one collector."""
    owner = owner_name(os.getpid(), uuid.uuid4().hex[:8])
    _made_here.add(owner)
    return owner


def owner_host(owner: str) -> str:
    """The host name of ``owner`` (of any format)."""
    return owner.partition(":")[0]


def owner_has_stopped(owner: str) -> bool:
    """Whether the collector that took a lease as ``owner`` ran in this machine's boot and
    pid namespace (its host name and space are this process's) and its process is gone: its
    leases only wait to run out. Any other owner, also one without a space (written before
    the space was added), may be alive."""
    host, _, rest = owner.partition(":")
    pid, at, space = rest.partition(":")[0].partition("@")
    if host != socket.gethostname() or not at or space != process_space():
        return False
    if not (pid.isascii() and pid.isdigit()) or len(pid) > 10:  # a pid is a C int
        return False
    if int(pid) == os.getpid():
        return owner not in _made_here
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError):  # another user's process; a pid no system has
        return False
    return False
