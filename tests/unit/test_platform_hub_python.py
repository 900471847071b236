"""The hub test's Python for the students: when there is none, the reason given is the real one."""

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

pytest.importorskip("pwd", reason="the class hub runs on Linux (system users)")
from tests.hub import harness  # noqa: E402 - after the skip: it imports pwd

pytestmark = pytest.mark.posix  # file modes


@pytest.fixture
def machine():
    """A folder every user can reach, with a private one (0700, as root's home) and a public one in it."""
    top = Path(tempfile.mkdtemp(prefix="labkit hub python "))  # not pytest's tmp: that is inside a private folder
    top.chmod(0o755)
    (top / "private").mkdir(mode=0o700)
    (top / "public").mkdir(mode=0o755)
    yield top
    shutil.rmtree(top)


def executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n", encoding="utf-8")
    path.chmod(0o755)
    return path


def test_a_link_from_a_private_folder_is_not_reachable_even_when_its_target_is(machine):
    target = executable(machine / "public" / "python3")
    link = machine / "private" / "venv" / "bin" / "python"
    link.parent.mkdir(parents=True)
    os.symlink(target, link)
    assert harness.reachable(target)
    assert not harness.reachable(link)  # a student cannot even get to the link through /root


@pytest.fixture
def private_environment(machine, monkeypatch):
    """This interpreter and its packages as if in root's private home; the system's Python in ``public``."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    venv = machine / "private" / "venv"
    monkeypatch.setattr(sys, "executable", str(executable(venv / "bin" / "python")))
    monkeypatch.setattr(sys, "base_prefix", str(machine / "private" / "pyenv"))
    packages = venv / "lib" / version / "site-packages"
    packages.mkdir(parents=True)
    monkeypatch.setattr(sys, "path", [path for path in sys.path if not path.endswith("site-packages")] + [str(packages)])
    monkeypatch.setattr(harness, "SYSTEM_BIN", machine / "public", raising=False)
    return machine / "public" / version, packages


def test_packages_out_of_reach_are_named_as_the_cause(private_environment, machine):
    system, packages = private_environment
    executable(system)
    with pytest.raises(RuntimeError) as raised:
        harness.student_python(machine)
    message = str(raised.value)
    assert str(packages) in message and "missing" not in message
    assert f"{system} is missing" not in message


def test_a_missing_system_python_is_named_as_the_cause(private_environment, machine):
    system, _ = private_environment
    with pytest.raises(RuntimeError, match=f"{system} is missing"):
        harness.student_python(machine)
