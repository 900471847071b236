"""The process registries: a pgbench whose kernel died is killed; a kernel's entry goes when it does."""

import subprocess
import sys

import psutil
import pytest

from labkit.registry import ProcessRegistry

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


def test_an_orphan_is_killed_and_a_living_owner_keeps_its_child(tmp_path):
    registry = ProcessRegistry(tmp_path / "pgbench")
    dead_owner = subprocess.Popen([sys.executable, "-c", "pass"])
    dead_owner.wait()
    orphan, kept = subprocess.Popen(SLEEPER), subprocess.Popen(SLEEPER)
    try:
        registry.add(orphan.pid, owner=dead_owner.pid, application_name="labkit-run-0123abcd")
        registry.add(kept.pid, owner=psutil.Process().pid)  # this test is the living owner
        reaped = registry.reap_orphans()
        assert [(entry["pid"], entry["killed"], entry["application_name"]) for entry in reaped] == [
            (orphan.pid, True, "labkit-run-0123abcd")]
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


def test_an_orphan_already_gone_is_still_reported_for_its_backends(tmp_path):
    """A pgbench the OS ended with its kernel: nothing to kill, but its run's backends must still go."""
    registry = ProcessRegistry(tmp_path / "pgbench")
    owner, pgbench = subprocess.Popen(SLEEPER), subprocess.Popen(SLEEPER)
    registry.add(pgbench.pid, owner=owner.pid, application_name="labkit-run-0123abcd")
    for process in (pgbench, owner):
        process.kill()
        process.wait()
    assert [(entry["killed"], entry["application_name"]) for entry in registry.reap_orphans()] == [
        (False, "labkit-run-0123abcd")]
    assert list(registry.folder.iterdir()) == []


def test_a_replace_is_retried_while_another_process_holds_the_file(tmp_path, monkeypatch):
    """Windows refuses to replace a file another process has open (PermissionError) for that moment."""
    import os

    from labkit import registry as registry_module

    real_replace, attempts = os.replace, []

    def busy_twice(source, target):
        attempts.append(target)
        if len(attempts) < 3:
            raise PermissionError(13, "The process cannot access the file because it is being used")
        real_replace(source, target)

    monkeypatch.setattr(os, "replace", busy_twice)
    registry_module.write_whole(tmp_path / "state.json", '{"port": 54321}')
    assert len(attempts) == 3 and registry_module.read_json(tmp_path / "state.json") == {"port": 54321}
    monkeypatch.setattr(os, "replace", lambda source, target: (_ for _ in ()).throw(PermissionError(13, "busy")))
    with pytest.raises(PermissionError):
        registry_module.retrying(os.replace, "a", "b", seconds=0.1)
