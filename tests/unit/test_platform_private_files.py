"""Private files on Windows: an access list of their own (the user and SYSTEM), not the folder's inherited one.

Windows has no file modes: ``chmod`` sets only the read-only flag, and a new file takes its
folder's inherited access list, which under ``C:\\`` (``LABKIT_HOME=C:\\labkit``) lets every
local user read it. The logic is tested here on every OS with the Windows calls replaced; the
last tests make the real calls, on Windows.
"""

import os
import stat
import sys
from pathlib import Path

import pytest

from labkit import _windows, config
from labkit.errors import LabkitError

USER = "S-1-5-21-1004336348-1177238915-682003330-1001"
SYSTEM = "S-1-5-18"
# What Windows reports for a folder made under C:\ (icacls C:\labkit, as SDDL): Users may read, Authenticated
# Users may change, all inherited.
UNDER_C = ("D:AI(A;OICIID;FA;;;BA)(A;OICIID;FA;;;SY)(A;OICIIOID;GA;;;CO)(A;OICIID;0x1200a9;;;BU)(A;CIID;LC;;;BU)"
           "(A;CIID;DC;;;BU)(A;ID;0x1301bf;;;AU)(A;OICIIOID;SDGXGWGR;;;AU)")


def test_the_access_list_of_a_private_folder_is_the_user_and_system_alone_with_nothing_inherited():
    dacl = _windows.parse_dacl(_windows.owner_only_sddl(USER, folder=True), USER)
    assert dacl.protected
    assert {(ace.kind, ace.sid, ace.rights) for ace in dacl.aces} == {("A", USER, 0x1F01FF), ("A", SYSTEM, 0x1F01FF)}
    assert all({"OI", "CI"} <= ace.flags for ace in dacl.aces)  # what is made inside takes the same list
    assert {ace.flags for ace in _windows.parse_dacl(_windows.owner_only_sddl(USER, folder=False), USER).aces} == {
        frozenset()}


def test_a_folder_under_c_is_read_as_open_to_every_local_user():
    dacl = _windows.parse_dacl(UNDER_C, USER)
    assert not dacl.protected
    readers = {ace.sid for ace in dacl.aces if ace.kind == "A" and ace.rights & 0x1}  # FILE_READ_DATA
    assert {"S-1-5-32-545", "S-1-5-11"} <= readers  # Users, Authenticated Users
    assert dacl != _windows.parse_dacl(_windows.owner_only_sddl(USER, folder=True), USER)


def test_sids_written_as_aliases_or_hex_rights_read_the_same():
    assert _windows.parse_dacl("D:P(A;;FA;;;S-1-5-18)", USER) == _windows.parse_dacl("D:P(A;;0x1f01ff;;;SY)", USER)
    assert {ace.sid for ace in _windows.parse_dacl("D:(A;;FA;;;LA)", "S-1-5-21-1-2-3-500").aces} == {
        "S-1-5-21-1-2-3-500"}


class FakeSecurity:
    """The three Windows calls, on a table of access lists; ``keeps`` False is a drive with none (FAT, exFAT)."""

    def __init__(self, keeps=True):
        self.acl: dict[Path, str] = {}
        self.writes: list[tuple[Path, str, int]] = []
        self.keeps = keeps

    def user_sid(self):
        return USER

    def read(self, path):
        return self.acl.get(Path(path), UNDER_C)

    def write(self, path, sddl):
        size = Path(path).stat().st_size if Path(path).is_file() else None
        self.writes.append((Path(path), sddl, size))
        if self.keeps:
            self.acl[Path(path)] = sddl


@pytest.fixture
def windows(monkeypatch):
    security = FakeSecurity()
    monkeypatch.setattr(config, "WINDOWS", True)
    monkeypatch.setattr(_windows, "security", lambda: security)
    return security


def test_a_private_file_gets_its_access_list_before_the_secret_is_in_it(windows, tmp_path):
    path = config.write_private(tmp_path / "password", "s3cret")
    assert path.read_text(encoding="utf-8") == "s3cret"
    ((written, sddl, size),) = windows.writes  # the new file, empty yet, that then replaces the old one
    assert (written.parent, sddl, size) == (tmp_path, _windows.owner_only_sddl(USER, folder=False), 0)
    assert written.name.startswith("password.") and not written.exists()


def test_a_private_folder_gets_its_access_list_once(windows, tmp_path):
    folder = config.private_dir(tmp_path / "home")
    config.private_dir(folder)
    assert windows.writes == [(folder, _windows.owner_only_sddl(USER, folder=True), None)]


def test_a_folder_meant_for_others_to_read_keeps_its_access_list(windows, tmp_path):
    config.private_dir(tmp_path / "results", 0o755)
    assert windows.writes == []


def test_a_folder_labkit_did_not_make_keeps_its_access_list_and_an_open_one_is_said(windows, tmp_path):
    """C:\\labkit made by hand takes C:\\'s inherited list, which lets Authenticated Users add files: said, not changed."""
    (tmp_path / "mine").mkdir()
    with pytest.warns(UserWarning, match=r"lets S-1-5-11, S-1-5-32-545 add files in it.*leaves the folder as it is"):
        config.private_dir(tmp_path / "mine")
    assert windows.writes == []


def test_a_drive_that_keeps_no_access_list_is_refused_with_what_to_do(windows, tmp_path):
    windows.keeps = False
    with pytest.raises(LabkitError, match=r"readable by you alone.*NTFS") as raised:
        config.write_private(tmp_path / "password", "s3cret")
    assert "\n" not in raised.value.short
    assert not (tmp_path / "password").exists() or (tmp_path / "password").read_text(encoding="utf-8") == ""


on_windows = pytest.mark.skipif(sys.platform != "win32", reason="Windows access lists (elsewhere: file modes, tested "
                                "in test_transports and test_records_profiles_charts)")


def allowed(path: Path) -> tuple[bool, set[str]]:
    """Whether ``path``'s access list is its own (protected), and whom it lets in, read back from Windows."""
    user = _windows.security().user_sid()
    dacl = _windows.parse_dacl(_windows.security().read(path), user)
    assert all(ace.kind == "A" for ace in dacl.aces)
    return dacl.protected, {ace.sid for ace in dacl.aces}


@on_windows
def test_on_windows_a_private_file_and_folder_are_the_user_and_systems_alone(tmp_path):
    user = _windows.security().user_sid()
    folder = config.private_dir(tmp_path / "home")
    secret = config.write_private(folder / "password", "s3cret")
    inside = folder / "made-inside"
    inside.write_text("x", encoding="utf-8")
    assert allowed(folder) == (True, {user, SYSTEM})
    assert allowed(secret) == (True, {user, SYSTEM})
    assert _windows.parse_dacl(_windows.security().read(inside), user).aces  # inherited from the folder:
    assert {ace.sid for ace in _windows.parse_dacl(_windows.security().read(inside), user).aces} == {user, SYSTEM}
    assert os.access(secret, os.R_OK) and secret.read_text(encoding="utf-8") == "s3cret"


@pytest.mark.posix
def test_a_secret_is_private_before_it_is_written_and_never_written_through_a_link(tmp_path, monkeypatch):
    """An older password file readable by others (0644), and a link planted where the state file goes."""
    import stat

    modes = []
    real_open = open

    class Watched:
        def __init__(self, handle):
            self.handle = handle

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return self.handle.__exit__(*exc)

        def write(self, text):
            modes.append(stat.S_IMODE(os.fstat(self.handle.fileno()).st_mode))
            return self.handle.write(text)

        def __getattr__(self, name):  # flush, fileno: the file's own
            return getattr(self.handle, name)

    monkeypatch.setattr(config, "open", lambda *args, **kwargs: Watched(real_open(*args, **kwargs)), raising=False)
    older = tmp_path / "password"
    older.write_text("old", encoding="utf-8")
    older.chmod(0o644)
    config.write_private(older, "s3cret")
    assert modes == [0o600]  # the file the secret went into was private when it went in
    assert stat.S_IMODE(older.stat().st_mode) == 0o600 and older.read_text(encoding="utf-8") == "s3cret"
    theirs = tmp_path / "theirs"
    theirs.write_text("theirs", encoding="utf-8")
    planted = tmp_path / "connection.json"
    planted.symlink_to(theirs)
    config.write_private(planted, "s3cret")
    assert theirs.read_text(encoding="utf-8") == "theirs"  # the link's target is untouched
    assert not planted.is_symlink() and planted.read_text(encoding="utf-8") == "s3cret"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["connection.json", "password", "theirs"]


@pytest.mark.posix
def test_a_folder_labkit_makes_is_private_and_one_it_did_not_make_is_left_as_it_was(tmp_path):
    import stat

    made = config.private_dir(tmp_path / "new parent" / "home")
    assert stat.S_IMODE(made.stat().st_mode) == 0o700 and stat.S_IMODE(made.parent.stat().st_mode) == 0o700
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o2775)  # a class's setgid folder
    with pytest.warns(UserWarning, match=r"shared is writable by its group \(mode 2775\).*leaves the folder as it is"):
        config.private_dir(shared)
    assert stat.S_IMODE(shared.stat().st_mode) == 0o2775
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    with pytest.warns(UserWarning, match=r"writable by its group and every user \(mode 1777\)"):
        config.private_dir(sticky, 0o711)
    assert stat.S_IMODE(sticky.stat().st_mode) == 0o1777  # others may still create files there
    own = tmp_path / "own"
    own.mkdir(mode=0o750)
    own.chmod(0o750)
    config.private_dir(own)  # others may read, not write: nothing to say (filterwarnings = error)
    assert stat.S_IMODE(own.stat().st_mode) == 0o750


@pytest.mark.skipif(sys.platform == "win32", reason="links a service user could plant (Windows: no service user)")
def test_a_log_in_the_servers_users_folder_is_never_written_through_a_link(tmp_path):
    """As root labkit appends to logs in a folder the server's user owns: a link planted there must not be followed."""
    import logging

    from labkit import watchdog

    target = tmp_path / "roots-file"
    target.write_text("root's\n", encoding="utf-8")
    for name in ("helper.log", "watchdog.log"):
        (tmp_path / name).symlink_to(target)
    with pytest.raises(OSError):
        config.append_no_link(tmp_path / "helper.log")
    with pytest.raises(OSError):
        watchdog._LogFile(tmp_path / "watchdog.log", encoding="utf-8")
    assert target.read_text(encoding="utf-8") == "root's\n"
    handler = watchdog._LogFile(tmp_path / "own.log", encoding="utf-8")  # a file of its own: made, private, appended
    handler.emit(logging.LogRecord("labkit", logging.INFO, __file__, 1, "watching", None, None))
    handler.close()
    assert (tmp_path / "own.log").read_text(encoding="utf-8") == "watching\n"
    assert stat.S_IMODE((tmp_path / "own.log").stat().st_mode) == 0o600
