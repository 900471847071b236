"""What labkit's helpers leave to see when they fail: useradd's own words, the watchdog's first breath; and a
socket folder in the shared temporary folder that someone else made first."""

import os
import stat
import sys
import tempfile
import time
from pathlib import Path

import pytest

from labkit import config, service_user
from labkit.embedded import EmbeddedServer
from labkit.errors import LabkitError


@pytest.mark.linux  # the service user is made on Linux only
def test_a_failed_useradd_says_what_useradd_said(tmp_path, monkeypatch):
    fake = tmp_path / "useradd"
    fake.write_text("#!/bin/sh\necho 'useradd: cannot lock /etc/passwd; try again later.' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(config, "is_root", lambda: True)
    monkeypatch.setattr(service_user, "NAME", "labkit_no_such_user")
    with pytest.raises(LabkitError, match=r"labkit_no_such_user.*cannot lock /etc/passwd; try again later") as raised:
        service_user.ids()
    assert "\n" not in raised.value.short


def test_a_watchdog_that_dies_at_once_leaves_its_traceback_in_its_log():
    home = Path(tempfile.mkdtemp(prefix="labkit watchdog "))
    try:
        (home / "watchdog.lock").mkdir()  # the watchdog cannot take its lock: it dies before it can log anything
        server = EmbeddedServer(home)
        server.spawn_watchdog()
        log = server.log_dir / "watchdog.log"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and "Error" not in (log.read_text() if log.exists() else ""):
            time.sleep(0.2)
        assert log.exists(), "the watchdog's output went nowhere"
        assert "Traceback" in log.read_text() and "watchdog.lock" in log.read_text()
    finally:
        import shutil

        shutil.rmtree(home, ignore_errors=True)


def long_home() -> Path:
    """A home whose socket path is too long for a Unix socket: its socket folder goes to the temporary folder."""
    home = Path(tempfile.mkdtemp(prefix="labkit socket " + "x" * (config.SOCKET_PATH_LIMIT - 20)))
    server = EmbeddedServer(home, transport="socket")
    assert server.socket_dir.parent == Path(tempfile.gettempdir())
    return home


@pytest.fixture
def taken():
    """An EmbeddedServer whose socket folder (in the shared temporary folder) is cleaned up after the test."""
    import shutil

    home = long_home()
    server = EmbeddedServer(home, transport="socket")
    yield server
    if server.socket_dir.is_symlink():
        server.socket_dir.unlink()
    shutil.rmtree(server.socket_dir, ignore_errors=True)
    shutil.rmtree(home, ignore_errors=True)


@pytest.mark.posix  # Unix sockets
def test_a_socket_folder_someone_linked_elsewhere_first_is_refused(taken, tmp_path):
    elsewhere = tmp_path / "theirs"
    elsewhere.mkdir(mode=0o755)
    os.symlink(elsewhere, taken.socket_dir)
    with pytest.raises(LabkitError, match=f"{taken.socket_dir}.*someone else") as raised:
        taken._prepare_dirs()
    assert "\n" not in raised.value.short
    assert stat.S_IMODE(elsewhere.stat().st_mode) == 0o755 and elsewhere.stat().st_uid == os.getuid()  # untouched


@pytest.mark.posix
@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="only root can make a folder another user owns")
def test_a_socket_folder_another_user_made_first_is_refused(taken):
    taken.socket_dir.mkdir(mode=0o777)
    os.chown(taken.socket_dir, 65534, 65534)  # nobody
    with pytest.raises(LabkitError, match="someone else"):
        taken._prepare_dirs()
    assert taken.socket_dir.stat().st_uid == 65534  # not taken over


@pytest.mark.posix
def test_a_socket_folder_of_ones_own_is_made_private(taken):
    taken.socket_dir.mkdir(mode=0o755)
    taken._prepare_dirs()
    assert stat.S_IMODE(taken.socket_dir.lstat().st_mode) == 0o700
    assert sys.platform == "win32" or taken.socket_dir.lstat().st_uid in {os.geteuid(), *([service_user.ids()[0]]
                                                                                          if config.is_root() else [])}


def test_a_watchdog_whose_home_was_removed_ends_without_making_it_again():
    from labkit.embedded import EmbeddedServer
    from labkit.watchdog import _stopped

    home = Path(tempfile.mkdtemp(prefix="labkit watchdog "))
    server = EmbeddedServer(home)
    home.rmdir()  # the home removed whole, its server stopped
    assert _stopped(server) is True
    assert not home.exists()  # taking the start lock would have made the folder again


def test_a_watchdog_that_begins_after_its_home_was_removed_does_not_make_it_again(tmp_path):
    from labkit import watchdog

    home = tmp_path / "removed home"
    watchdog.watch(home)  # its lock file and log would be made inside the home
    assert not home.exists()


def test_stopping_a_server_that_was_never_made_makes_no_home(tmp_path):
    home = tmp_path / "never made"
    assert EmbeddedServer(home).stop() is False
    assert not home.exists()
