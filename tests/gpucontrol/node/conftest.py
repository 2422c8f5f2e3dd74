"""Fixtures of the node agent's tests (and of actuators/ below): real child processes and
fresh cgroup v2 groups. One conftest for the whole folder: with --doctest-modules pytest
imports every conftest.py as a module named ``conftest``, so two of them here would clash."""

import os
import uuid
from pathlib import Path

import pytest
from actuators._children import Children

from gpucontrol.node.actuators.sleep import cgroup2_mounts


@pytest.fixture
def children():
    """Real child processes for a test; every one is resumed and killed at teardown."""
    c = Children()
    try:
        yield c
    finally:
        c.cleanup()


@pytest.fixture
def cgroup_factory():
    """Returns ``make() -> Path | None``: fresh cgroup v2 groups, thawed, killed and removed
    at teardown; None where this machine gives us none."""
    made: list[Path] = []

    def make():
        for mount in cgroup2_mounts():
            path = Path(mount) / f"gpucontrol-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
            try:
                path.mkdir()
            except OSError:
                continue
            made.append(path)
            if (path / "cgroup.freeze").exists():
                return path
        return None

    try:
        yield make
    finally:
        for path in reversed(made):
            for name, value in (("cgroup.freeze", "0"), ("cgroup.kill", "1")):
                try:
                    (path / name).write_text(value)
                except OSError:
                    pass
            _remove_group(path)


@pytest.fixture
def cpu_groups():
    """Returns ``make(quota_pct=None) -> Path``: fresh groups under the cgroup CPU controller's
    root (optionally capped at ``quota_pct`` % of one CPU), for a training's own group; skips
    where no CPU controller is writable. At teardown their members go to the root group and
    the groups are removed."""
    from gpucontrol.errors import ConfigurationError
    from gpucontrol.node.actuators.cpu_share import detect_backend

    try:
        backend, base = detect_backend()
    except ConfigurationError:
        pytest.skip("no writable cgroup CPU controller here")
    made: list[Path] = []

    def make(quota_pct=None):
        path = base / f"gpucontrol-test-home-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        path.mkdir()
        made.append(path)
        if quota_pct is not None:
            quota = int(quota_pct * 1000)  # of a 100 ms period
            if backend == "cpu.max":
                (path / "cpu.max").write_text(f"{quota} 100000")
            else:
                (path / "cpu.cfs_period_us").write_text("100000")
                (path / "cpu.cfs_quota_us").write_text(str(quota))
        return path

    def empty(path):  # its members to the root group, at every try
        for pid in (path / "cgroup.procs").read_text().split():
            try:
                (base / "cgroup.procs").write_text(pid)
            except OSError:
                pass

    try:
        yield make
    finally:
        for path in reversed(made):
            _remove_group(path, before=empty)


def _remove_group(path, before=None):
    """Remove a test's cgroup, retrying for 2 s while its members exit (``before(path)``
    runs before every try); a group already gone is fine."""
    import time

    for _ in range(200):
        try:
            if before is not None:
                before(path)
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.01)


@pytest.fixture
def cgroup_dir(cgroup_factory):
    """A fresh, empty cgroup v2 group we may write (skips where none can be created)."""
    path = cgroup_factory()
    if path is None:
        pytest.skip("no writable cgroup v2 hierarchy with cgroup.freeze on this machine")
    return path
