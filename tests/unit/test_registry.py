"""The process registries: a pgbench whose kernel died is killed; a kernel's entry goes when it does."""

import subprocess
import sys

import psutil

from labkit.registry import ProcessRegistry

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


def test_an_orphan_is_killed_and_a_living_owner_keeps_its_child(tmp_path):
    registry = ProcessRegistry(tmp_path / "pgbench")
    dead_owner = subprocess.Popen([sys.executable, "-c", "pass"])
    dead_owner.wait()
    orphan, kept = subprocess.Popen(SLEEPER), subprocess.Popen(SLEEPER)
    try:
        registry.add(orphan.pid, owner=dead_owner.pid)
        registry.add(kept.pid, owner=psutil.Process().pid)  # this test is the living owner
        assert registry.reap_orphans() == [orphan.pid]
        assert orphan.wait(timeout=10) is not None
        assert kept.poll() is None
        assert sorted(path.name for path in registry.folder.iterdir()) == [f"{kept.pid}.json"]
    finally:
        for process in (orphan, kept):
            process.kill()
            process.wait()


def test_a_recycled_pid_is_not_taken_for_the_registered_process(tmp_path):
    registry = ProcessRegistry(tmp_path / "kernels")
    kernel = subprocess.Popen(SLEEPER)
    try:
        path = registry.add(kernel.pid)
        assert registry.live() == [kernel.pid]
        entry = path.read_text(encoding="utf-8").replace('"created": ', '"created": 1')  # another start time
        path.write_text(entry, encoding="utf-8")
        assert registry.live() == [] and not path.exists()
    finally:
        kernel.kill()
        kernel.wait()


def test_pinned_keeps_the_server_without_kernels(tmp_path):
    registry = ProcessRegistry(tmp_path / "kernels")
    registry.pin(True)
    assert registry.live() == [0]
    registry.pin(False)
    assert registry.live() == []
