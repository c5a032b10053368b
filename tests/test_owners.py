"""Lease owners (``host:pid@space:nonce``): only an owner of this host name *and* this boot and
pid namespace is judged by its pid. Containers sharing a host name (host network, a fixed
``hostname:``) have pids of their own: a live collector of another one looked stopped here, its
feeds were taken back and fetched twice."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from feedcollector import owners
from feedcollector.owners import (
    new_owner,
    owner_has_stopped,
    owner_host,
    owner_name,
    process_space,
    space_of,
)

HOST = socket.gethostname()
OTHER_SPACE = "0badf00d"


@pytest.fixture
def ended_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


@pytest.fixture
def live_pid() -> Iterator[int]:
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        yield process.pid
    finally:
        process.kill()
        process.wait()


def test_an_owner_names_its_host_pid_and_space() -> None:
    owner = new_owner()
    host, pid_and_space, nonce = owner.split(":")
    assert (host, pid_and_space) == (HOST, f"{os.getpid()}@{process_space()}")
    assert len(nonce) == 8
    assert owner_host(owner) == HOST
    assert new_owner() != owner, "one per collector"
    assert len(process_space()) == 8 or process_space() == owners.NO_NAMESPACES


def test_an_owner_of_this_space_whose_process_ended_has_stopped(ended_pid: int) -> None:
    assert owner_has_stopped(owner_name(ended_pid, "0f0f0f0f"))


def test_an_owner_of_this_space_whose_process_runs_has_not(live_pid: int) -> None:
    assert not owner_has_stopped(owner_name(live_pid, "0f0f0f0f"))
    assert not owner_has_stopped(new_owner()), "this process's own"


def test_an_owner_of_another_pid_namespace_or_boot_is_never_judged(ended_pid: int) -> None:
    """The defect: its pid means another process there, running or not; its leases run out."""
    assert not owner_has_stopped(f"{HOST}:{ended_pid}@{OTHER_SPACE}:0f0f0f0f")
    assert not owner_has_stopped(f"{HOST}:{os.getpid()}@{OTHER_SPACE}:0f0f0f0f")


def test_an_owner_of_this_pid_that_this_process_did_not_make_has_stopped() -> None:
    """A restarted container's collector often gets the pid its predecessor had (in a pid
    namespace whose inode the kernel gave again): that one is gone, not this process."""
    assert owner_has_stopped(owner_name(os.getpid(), "0f0f0f0f"))
    assert not owner_has_stopped(new_owner())


def test_an_owner_of_another_host_name_is_never_judged(ended_pid: int) -> None:
    owner = owner_name(ended_pid, "0f0f0f0f")
    assert not owner_has_stopped(owner.replace(HOST, HOST + "-other", 1))


def test_an_owner_written_before_the_space_was_added_is_never_judged(ended_pid: int) -> None:
    """``host:pid:nonce``: whether the pid was one of this namespace cannot be known, so its
    leases run out (a collector killed before an upgrade), rather than a live collector of
    another container losing them."""
    assert not owner_has_stopped(f"{HOST}:{ended_pid}:0f0f0f0f")
    assert not owner_has_stopped(f"{HOST}:{os.getpid()}:0f0f0f0f")


@pytest.mark.parametrize(
    "pid", ["", "x", "-1", "1.5", "\u0661", "99999999999", "9" * 5000, "12 ", "+3"]
)
def test_an_owner_with_no_pid_is_never_judged(pid: str) -> None:
    assert not owner_has_stopped(f"{HOST}:{pid}@{process_space()}:0f0f0f0f")


@pytest.mark.parametrize("owner", ["", HOST, f"{HOST}:", f"{HOST}:1@", "by hand", "a:b:c:d"])
def test_any_other_text_is_never_judged(owner: str) -> None:
    assert not owner_has_stopped(owner)


def test_the_space_is_the_boot_and_the_pid_namespace() -> None:
    boot = "2f6a2b8e-46e4-4e0b-a1f9-7c1f3e0d9a11"
    assert space_of(boot, 4026531836) == space_of(boot, 4026531836)
    assert space_of(boot, 4026531836) != space_of(boot, 4026532512), "another container"
    other_boot = "9d0c4f55-1b3e-4f4f-8d7a-3e2b1c0a9f88"
    assert space_of(other_boot, 4026531836) != space_of(boot, 4026531836), "another boot"
    unknown = {space_of(None, 4026531836), space_of(boot, None), space_of("", 1)}
    assert len(unknown) == 3, "unknown: a space of its own, no other process's"


def test_processes_of_one_namespace_share_the_space() -> None:
    """A ``feedcollector`` command judges the leases of a ``run`` beside it."""
    code = "from feedcollector.owners import process_space; print(process_space())"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == process_space()


def test_where_the_boot_or_namespace_cannot_be_read_the_space_is_random(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(owners, "BOOT_ID", tmp_path / "missing")
    process_space.cache_clear()
    try:
        first = process_space()
        assert process_space() == first, "kept for the process"
        process_space.cache_clear()
        assert process_space() != first
    finally:
        process_space.cache_clear()


def test_a_system_without_pid_namespaces_judges_by_pid(
    monkeypatch: pytest.MonkeyPatch, ended_pid: int
) -> None:
    monkeypatch.setattr(sys, "platform", "darwin")
    process_space.cache_clear()
    try:
        assert process_space() == owners.NO_NAMESPACES
        assert owner_has_stopped(owner_name(ended_pid, "0f0f0f0f"))
    finally:
        process_space.cache_clear()


def _in_new_pid_namespace(code: str) -> subprocess.CompletedProcess[str]:
    unshare = shutil.which("unshare")
    if sys.platform != "linux" or unshare is None:
        pytest.skip("needs Linux and unshare")
    command = [unshare, "--user", "--map-root-user", "--pid", "--fork", "--mount-proc"]
    result = subprocess.run(
        [*command, sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    if result.returncode != 0 and "unshare" in result.stderr:
        pytest.skip(f"no pid namespace here: {result.stderr.strip()}")
    assert result.returncode == 0, result.stderr
    return result


def test_a_collector_in_another_pid_namespace_is_told_apart(ended_pid: int) -> None:
    """For real: a process in a new pid namespace (a container) has a space of its own; an
    owner of it with a pid no process has here is not judged stopped, and it does not judge
    the owners of this namespace either."""
    here = owner_name(ended_pid, "0f0f0f0f")
    code = (
        "from feedcollector.owners import new_owner, owner_has_stopped\n"
        f"print(new_owner(), owner_has_stopped({here!r}))\n"
    )
    there, judged = _in_new_pid_namespace(code).stdout.split()
    assert judged == "False"
    host, pid_and_space, nonce = there.split(":")
    space = pid_and_space.partition("@")[2]
    assert (host, len(space)) == (HOST, 8)
    assert space != process_space()
    assert not owner_has_stopped(f"{host}:{ended_pid}@{space}:{nonce}")
    assert owner_has_stopped(here), "the same owner, judged here"
