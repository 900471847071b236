"""The embedded server: start, reuse, settings, restart, recovery, and how it listens on this OS.

On Linux and macOS the server has a Unix socket in a private folder and no TCP listener; on
Windows it listens on 127.0.0.1 only, with a password (tests/integration/test_transports.py runs
that transport on every OS).
"""

import contextlib
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

import psutil
import psycopg
import pytest

import labkit
from labkit import config
from labkit import lab as lab_module
from labkit.embedded import INCLUDE_LINE, EmbeddedServer
from labkit.errors import LabkitError, UsageError
from labkit.profiles import Profile

pytestmark = pytest.mark.integration


def test_start_reuses_the_running_server(lab):
    server = EmbeddedServer()
    assert server.running()
    assert server.start(Profile.named("ci"), watch=False) is False  # already running: reused
    again = labkit.start("tests")
    assert again.database == lab.database == "lab_tests"
    assert again.value("select current_setting('server_version_num')::int") >= 180000
    again.close()


def test_on_binder_without_a_profile_the_ci_profile_is_used_and_said(lab, monkeypatch):
    monkeypatch.delenv("LABKIT_PROFILE", raising=False)
    monkeypatch.setenv("BINDER_REPO_URL", "https://github.com/someone/pg-labs")
    binder = labkit.start("tests")
    assert binder.profile.name == "ci"
    assert any("On Binder" in message for message in binder.messages)
    monkeypatch.delenv("BINDER_REPO_URL")
    assert labkit.start("tests", profile="ci").messages == [m for m in binder.messages if "On Binder" not in m]


def test_lab_settings_and_how_it_listens(lab):
    settings = lab.settings().set_index("name")["setting"]
    assert settings["shared_preload_libraries"] == "pg_stat_statements"
    assert settings["synchronous_commit"] == "off"
    # The connection check where the OS has it (the manual: Linux, macOS, illumos, the BSDs).
    assert settings["client_connection_check_interval"] == ("0" if os.name == "nt" else "2000")
    assert lab.value("select count(*) from pg_extension where extname = 'pg_stat_statements'") == 1
    server = EmbeddedServer()
    postmaster = psutil.Process(server.postmaster_pid())
    listening = {(c.laddr.ip, c.laddr.port) for c in postmaster.net_connections(kind="inet")
                 if c.status == psutil.CONN_LISTEN}
    if os.name == "nt":
        assert settings["listen_addresses"] == "127.0.0.1"
        assert listening == {("127.0.0.1", server.port)}
    else:
        assert settings["listen_addresses"] == ""
        assert listening == set()
        assert stat.S_IMODE(server.socket_dir.stat().st_mode) == 0o700


def test_setting_that_needs_a_restart(lab):
    before, work_mem = int(lab.value("show max_connections")), lab.value("show work_mem")
    try:
        changed = lab.set(max_connections=before + 5)
        assert changed.loc[0, "restarted"]
        assert int(changed.loc[0, "after"]) == before + 5
        assert int(lab.value("show max_connections")) == before + 5
        reloaded = lab.set(work_mem="8MB")
        assert not reloaded.loc[0, "restarted"]
    finally:  # the test session's later tests find the server as it was
        lab.set(max_connections=before, work_mem=work_mem)


def test_a_restart_never_stops_another_notebooks_run(lab):
    """Another kernel's pgbench is registered: a setting that needs a restart is refused, naming it."""
    registry = lab.server.pgbench_registry()
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        registry.add(other.pid, owner=other.pid, notebook="02-flash-sale")
        before = int(lab.value("show max_connections"))
        with pytest.raises(UsageError, match="restarts the server, which would stop the pgbench run of 02-flash-sale"):
            lab.set(max_connections=before + 5)
        assert not lab.settings("max_connections").loc[0, "pending_restart"]  # refused before anything changed
        work_mem = lab.value("show work_mem")
        assert not lab.set(work_mem="8MB").loc[0, "restarted"]  # a reload is still fine
        lab.set(work_mem=work_mem)
    finally:
        other.kill()
        other.wait()
        registry.remove(other.pid)
    assert int(lab.value("show max_connections")) == before


def test_a_settings_name_is_read_as_postgresql_reads_it_whatever_its_case(lab):
    work_mem = lab.value("show work_mem")
    try:
        lab.set(Work_Mem="6MB")
        assert lab.value("show work_mem") == "6MB"
    finally:
        lab.set(work_mem=work_mem)


def test_unknown_setting_is_refused(lab):
    with pytest.raises(labkit.UsageError, match="Unknown setting"):
        lab.set(max_conections=10)


@pytest.mark.parametrize("setting", [{"port": 6543}, {"listen_addresses": "*"}, {"unix_socket_permissions": "0777"}])
def test_where_the_server_listens_is_refused_and_nothing_is_changed(lab, setting):
    before = lab.settings(*setting)["setting"].tolist()
    with pytest.raises(labkit.UsageError, match="labkit decides where its server listens"):
        lab.set(**setting)
    assert lab.settings(*setting)["setting"].tolist() == before
    assert not lab.settings(*setting)["pending_restart"].any()


@pytest.mark.posix
def test_a_home_labkit_did_not_make_keeps_its_mode_and_an_open_one_is_said():
    """A class's shared folder given as LABKIT_HOME (sticky, as /tmp is): others may still create files in it."""
    home = Path(tempfile.mkdtemp(prefix="labkit-shared home-"))
    home.chmod(0o1777)
    try:
        server = EmbeddedServer(home)
        with pytest.warns(UserWarning, match=r"is writable by its group and every user \(mode 1777\)") as said:
            with server._locked():  # as start() prepares its folders: under the lock, in the home made first
                server._prepare_dirs()
        assert len([w for w in said if "writable" in str(w.message)]) == 1  # said once per start
        assert stat.S_IMODE(home.stat().st_mode) == 0o1777
        assert stat.S_IMODE((home / "cluster").stat().st_mode) == 0o700  # what labkit made there is private
        assert stat.S_IMODE((home / "log").stat().st_mode) == 0o700
    finally:
        shutil.rmtree(home, ignore_errors=True)


@pytest.mark.posix
@pytest.mark.parametrize("name", ["log", "cluster", "run"])
def test_a_folder_of_labkits_names_that_labkit_did_not_make_is_left_as_it_is_and_said(name):
    """A project folder given as LABKIT_HOME that has its own ``log/`` (0755): its mode and owner stay."""
    home = Path(tempfile.mkdtemp(prefix="labkit-given home-"))
    try:
        theirs = home / name
        theirs.mkdir()
        theirs.chmod(0o755)
        owner = theirs.stat().st_uid
        server = EmbeddedServer(home)
        if name == "run" and server.socket_dir != theirs:
            pytest.skip("the socket folder is in the temporary folder here (the home's path is too long)")
        with pytest.raises(LabkitError, match=rf"{name} is open to others \(mode 755\): labkit did not make it"):
            with server._locked():
                server._prepare_dirs()
        assert stat.S_IMODE(theirs.stat().st_mode) == 0o755
        assert theirs.stat().st_uid == owner
    finally:
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def own_server():
    """A server of the test's own (one it may leave unable to start), stopped and removed at the end."""
    home = Path(tempfile.mkdtemp(prefix="labkit-own server-"))
    server = EmbeddedServer(home)
    server.start(Profile.named("ci"), watch=False)
    yield server
    server.stop(mode="immediate")
    shutil.rmtree(home, ignore_errors=True)


NO_SUCH_LIBRARY = "labkit_no_such_library"
REFUSED = f'could not access file "{NO_SUCH_LIBRARY}": No such file or directory'


def test_a_setting_the_server_cannot_start_with_is_undone_and_said(own_server):
    """ALTER SYSTEM takes a value the server then cannot start with (a library that is not there here; on a
    laptop, shared_buffers='200GB'): left in postgresql.auto.conf it would keep the server down for good."""
    from labkit.lab import Lab

    lab = Lab(own_server, "refused", Profile.named("ci"), messages=[])
    lab.set(max_connections=120)  # an earlier lab.set: put back as it was, not to the default
    with pytest.raises(UsageError) as raised:
        lab.set(max_connections=130, shared_preload_libraries=NO_SUCH_LIBRARY)
    assert str(raised.value) == (
        f"The server would not start with max_connections=130, shared_preload_libraries='{NO_SUCH_LIBRARY}': "
        f"{REFUSED}. labkit put max_connections back to '120', shared_preload_libraries back to its default and "
        "started the server again (sessions connect again by themselves): choose another value.")
    assert own_server.running() and own_server.altered() == {"max_connections": "'120'"}
    settings = lab.settings("max_connections", "shared_preload_libraries").set_index("name")["setting"]
    assert (settings["max_connections"], settings["shared_preload_libraries"]) == ("120", "pg_stat_statements")
    assert own_server.last_start_failure() is None


def test_a_setting_after_which_no_connection_starts_is_undone_and_said(own_server):
    """A reload applies session_preload_libraries to every new backend: one that is not there would lock every
    notebook out of the server (each connection ends with FATAL) until someone edits postgresql.auto.conf."""
    from labkit.lab import Lab

    lab = Lab(own_server, "locked-out", Profile.named("ci"), messages=[])
    with pytest.raises(UsageError) as raised:
        lab.set(session_preload_libraries=NO_SUCH_LIBRARY)
    assert str(raised.value).startswith(f"With session_preload_libraries='{NO_SUCH_LIBRARY}' the server refuses "
                                        "every new connection (could not access file")
    assert str(raised.value).endswith("labkit put session_preload_libraries back to its default. Choose another value.")
    assert lab.settings("session_preload_libraries").iloc[0]["setting"] == ""  # over a new connection
    assert own_server.altered() == {}


def test_a_value_refused_by_alter_system_leaves_the_settings_written_before_it_as_they_were(own_server):
    """lab.set(a=..., b=<a value the server refuses>): a, written first, would otherwise stay in
    postgresql.auto.conf with no pending restart to show it, and keep the next restart from starting."""
    from labkit.lab import Lab

    lab = Lab(own_server, "half-refused", Profile.named("ci"), messages=[])
    lab.set(max_connections=120)
    with pytest.raises(LabkitError, match='invalid value for parameter "work_mem": "bogus"'):
        lab.set(shared_preload_libraries=NO_SUCH_LIBRARY, max_connections=140, work_mem="bogus")
    assert own_server.altered() == {"max_connections": "'120'"}
    own_server.restart()  # starts: nothing of the refused call was left behind
    assert lab.settings("max_connections").iloc[0]["setting"] == "120"


@pytest.mark.skipif(sys.platform == "win32", reason="a Unix socket file (Windows: TCP, no socket file)")
def test_a_server_whose_socket_file_was_removed_is_still_watched_and_the_next_start_recovers_it(own_server):
    """A clean-up of the temporary folder can remove the socket file of a running server."""
    from labkit import watchdog

    before = own_server.postmaster_pid()
    (own_server.socket_dir / ".s.PGSQL.5432").unlink()
    assert not own_server.running() and own_server.postmaster_pid() == before
    assert watchdog._stopped(own_server) is False  # still a server to watch: idle stop, reaping
    own_server.register_kernel()  # as labkit.start() registers its own kernel before it starts the server
    try:
        assert own_server.start(Profile.named("ci"), watch=False) is True
    finally:
        own_server.unregister_kernel()
    assert own_server.running() and own_server.postmaster_pid() != before
    assert not psutil.pid_exists(before) or psutil.Process(before).status() == psutil.STATUS_ZOMBIE


@pytest.mark.skipif(sys.platform == "win32", reason="file modes (Windows: access lists, in test_platform_private_files)")
def test_a_home_that_start_makes_is_private_whatever_the_umask(monkeypatch, tmp_path):
    """The start lock's file is inside the home: taking it first would make the home at the umask's mode."""
    home = tmp_path / "new home" / "labkit"
    server = EmbeddedServer(home)

    class Stop(Exception):
        pass

    def stop_here(self):
        raise Stop

    monkeypatch.setattr(EmbeddedServer, "_prepare_dirs", stop_here)  # after the lock is taken, before the server
    old = os.umask(0o002)
    try:
        with pytest.raises(Stop):
            server.start(Profile.named("ci"), watch=False)
    finally:
        os.umask(old)
    mode = stat.S_IMODE(home.stat().st_mode)
    assert mode & 0o077 == (0o011 if config.is_root() else 0), oct(mode)
    assert stat.S_IMODE(home.parent.stat().st_mode) & 0o022 == 0  # nor the missing parents labkit made


def test_a_restart_whose_stop_gives_up_puts_the_settings_back_and_says_the_server_never_stopped(own_server,
                                                                                                  monkeypatch):
    """pg_ctl stop can time out (a backend that will not end): the server runs on, and the new values must not wait
    in postgresql.auto.conf for the next restart, nor the student be told it was started again."""
    from labkit.lab import Lab

    lab = Lab(own_server, "stop-timeout", Profile.named("ci"), messages=[])
    lab.set(max_connections=120)

    def stop_gives_up():
        raise labkit.ServerStartFailed("`pg_ctl stop` did not finish within 90 s.")

    monkeypatch.setattr(own_server, "restart", stop_gives_up)
    with pytest.raises(UsageError, match=r"did not stop for the restart max_connections=150 needs .*put "
                                         r"max_connections back to '120' in ALTER SYSTEM's file"):
        lab.set(max_connections=150)
    assert own_server.running() and own_server.altered() == {"max_connections": "'120'"}
    own_server.stop()  # as a stop that went on by itself: the next start reads the values put back
    own_server.start(Profile.named("ci"), watch=False)
    assert lab.settings("max_connections").iloc[0]["setting"] == "120"


def test_a_server_a_setting_keeps_from_starting_says_how_to_recover_and_the_cli_recovers_it(own_server, monkeypatch,
                                                                                           capsys):
    """A cluster left so by hand, or by an older labkit: labkit.start(), doctor and the way back."""
    from labkit.__main__ import main

    own_server.stop()
    auto_conf = own_server.data_dir / "postgresql.auto.conf"
    auto_conf.write_text(auto_conf.read_text(encoding="utf-8") + f"shared_preload_libraries = '{NO_SUCH_LIBRARY}'\n",
                         encoding="utf-8")
    with pytest.raises(labkit.ServerStartFailed) as raised:
        own_server.start(Profile.named("ci"), watch=False)
    assert raised.value.short == (
        f"The lab server did not start: {REFUSED}. Settings made with lab.set (ALTER SYSTEM, in {auto_conf}): "
        f"shared_preload_libraries = '{NO_SUCH_LIBRARY}'. If one keeps the server from starting, `python -m labkit "
        "server reset-settings` removes them (keeping a copy) and starts it again.")
    monkeypatch.setenv("LABKIT_HOME", str(own_server.home))
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    said = next((line.removeprefix("last start").strip() for line in out.splitlines() if line.startswith("last start")),
                out)
    assert said.startswith(f"failed: The lab server did not start: {REFUSED}. Settings made with lab.set (ALTER SYSTEM, "
                           f"in {auto_conf})"), said
    assert said.endswith("`python -m labkit server reset-settings` removes them (keeping a copy) and starts it again.")
    assert main(["server", "reset-settings"]) == 0
    assert capsys.readouterr().out.startswith(f"removed shared_preload_libraries = '{NO_SUCH_LIBRARY}' (a copy is in ")
    assert own_server.running() and own_server.altered() == {}
    (copy,) = own_server.log_dir.glob("postgresql.auto.conf.*")
    assert NO_SUCH_LIBRARY in copy.read_text(encoding="utf-8")  # nothing is lost
    assert own_server.last_start_failure() is None
    own_server.stop()  # (reset-settings started its watchdog: it leaves with the server)


def test_a_start_that_times_out_leaves_no_server_coming_up_behind_it(own_server):
    """pg_ctl gives up waiting without stopping the postmaster it started: labkit must (kill on timeout)."""
    own_server.stop()
    own_server.start_timeout_s = 0  # pg_ctl -t 0: it gives up at once, the postmaster still starting
    with pytest.raises(labkit.ServerStartFailed, match=r"^The lab server was still starting after 0 s: labkit stopped it"):
        own_server.start(Profile.named("ci"), watch=False)
    # what doctor says of the last start: the same sentence, not pg_ctl's exit status
    assert own_server.last_start_failure().startswith("The lab server was still starting after 0 s: labkit stopped it")
    time.sleep(2)  # long enough for a server left behind to come up
    assert not own_server.running() and own_server._postmasters() == []
    own_server.start_timeout_s = 60
    assert own_server.start(Profile.named("ci"), watch=False) is True


def test_a_profile_the_server_cannot_start_with_is_put_back_and_said(own_server):
    """labkit.start() raises a larger profile's settings with a restart: one the machine refuses must not brick it."""
    from labkit import lab as lab_module

    before = own_server.altered()
    said = lab_module._apply_profile(own_server, Profile.named("laptop"), [("shared_buffers", "16MB", "200GB")])
    assert said.startswith("The server would not start with the 'laptop' profile's settings (shared_buffers 16MB, "
                           "laptop asks 200GB): "), said
    assert "labkit put them back and started it again" in said
    assert own_server.running() and own_server.altered() == before
    with psycopg.connect(own_server.conninfo("postgres")) as connection:
        assert connection.execute("show shared_buffers").fetchone()[0] != "200GB"


@pytest.mark.posix
@pytest.mark.skipif(sys.platform == "win32", reason="a Unix socket file (Windows: TCP, no socket file)")
def test_a_start_leaves_a_server_without_its_socket_alone_while_another_notebook_uses_it(own_server):
    """A tmp cleaner removed the socket file while a kernel used the server: start() says so and does not end it."""
    own_server.start(Profile.named("ci"), watch=False)
    postmaster = own_server.postmaster_pid()
    (own_server.socket_dir / ".s.PGSQL.5432").unlink()
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])  # the other notebook's kernel
    own_server.kernels.add(other.pid)
    own_server.register_kernel()  # and this one, as labkit.start() registers it before it starts the server
    try:
        with pytest.raises(labkit.ServerStartFailed, match="without its socket file .* `python -m labkit server stop`"):
            own_server.start(Profile.named("ci"), watch=False)
        assert psutil.pid_exists(postmaster) and own_server.postmaster_pid() == postmaster
    finally:
        own_server.unregister_kernel()
        other.kill()
        other.wait()
    own_server.stop()  # pg_ctl stop needs no socket: the next start is a clean one
    assert own_server.start(Profile.named("ci"), watch=False) is True


def test_a_tcp_port_taken_before_the_server_listens_is_traded_for_another(monkeypatch):
    """Between labkit's check that a port is free and the server's bind, another program may take it."""
    import socket

    from labkit import embedded

    taken = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    real, asked = embedded.free_port, []

    def raced(host="127.0.0.1", preferred=None):
        asked.append(preferred)
        return port if len(asked) == 1 else real(host, preferred)  # free when checked, taken when the server binds

    monkeypatch.setattr(embedded, "free_port", raced)
    home = Path(tempfile.mkdtemp(prefix="labkit-raced port-"))
    server = EmbeddedServer(home, transport="tcp")
    try:
        assert server.start(Profile.named("ci"), watch=False) is True
        assert server.port != port and asked == [None, port]
        with psycopg.connect(server.conninfo(), connect_timeout=5) as connection:
            assert connection.execute("select 1").fetchone() == (1,)
    finally:
        taken.close()
        server.stop(mode="immediate")
        shutil.rmtree(home, ignore_errors=True)


def test_a_killed_server_is_recovered_by_the_next_start():
    home = Path(tempfile.mkdtemp(prefix="labkit-kill-"))
    server = EmbeddedServer(home)
    try:
        server.start(Profile.named("ci"), watch=False)
        psutil.Process(server.postmaster_pid()).kill()  # SIGKILL; TerminateProcess on Windows
        deadline = time.monotonic() + 10
        while server.postmaster_pid() is not None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert (server.data_dir / "postmaster.pid").exists()  # the stale handle it left
        assert server.start(Profile.named("ci"), watch=False) is True
        with psycopg.connect(server.conninfo(), connect_timeout=5) as connection:
            assert connection.execute("select 1").fetchone() == (1,)
    finally:
        server.stop(mode="immediate")
        shutil.rmtree(home, ignore_errors=True)


def test_a_first_start_interrupted_during_initdb_leaves_no_cluster_and_the_next_start_makes_one(monkeypatch):
    """initdb writes PG_VERSION early: an interrupt after that must not leave a cluster that counts as made."""
    home = Path(tempfile.mkdtemp(prefix="labkit-initdb ïnterrupted-"))
    server = EmbeddedServer(home)
    real = EmbeddedServer._program

    def interrupted(self, name, *args, **options):
        if name != "initdb":
            return real(self, name, *args, **options)
        folder = Path(args[args.index("-D") + 1])
        (folder / "PG_VERSION").write_text("18\n")  # as far as initdb got when Ctrl+C came
        raise KeyboardInterrupt

    try:
        monkeypatch.setattr(EmbeddedServer, "_program", interrupted)
        with pytest.raises(KeyboardInterrupt):
            server.start(Profile.named("ci"), watch=False)
        assert not server.initialized()  # what initdb left is not the data folder
        monkeypatch.setattr(EmbeddedServer, "_program", real)
        assert server.start(Profile.named("ci"), watch=False) is True
        with psycopg.connect(server.conninfo(), connect_timeout=5) as connection:
            assert connection.execute("select 1").fetchone() == (1,)
        assert not (home / "cluster.initdb").exists()
    finally:
        server.stop(mode="immediate")
        shutil.rmtree(home, ignore_errors=True)


def test_a_start_interrupted_while_pg_ctl_waits_leaves_no_server_running(own_server, monkeypatch):
    """Ctrl+C ends pg_ctl start; the postmaster it launched must not run on with no watchdog."""
    own_server.stop()
    real = subprocess.run

    def interrupted(command, *args, **options):
        if "start" not in command:
            return real(command, *args, **options)
        process = subprocess.Popen(command, *args, **{k: v for k, v in options.items() if k != "timeout"})
        time.sleep(0.3)  # pg_ctl has launched the postmaster and waits for it
        process.kill()
        process.wait()
        raise KeyboardInterrupt

    monkeypatch.setattr(subprocess, "run", interrupted)
    with pytest.raises(KeyboardInterrupt):
        own_server.start(Profile.named("ci"), watch=False)
    monkeypatch.setattr(subprocess, "run", real)
    time.sleep(2)  # long enough for a server left behind to come up
    assert not own_server.running() and own_server._postmasters() == []
    assert own_server.start(Profile.named("ci"), watch=False) is True


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="as root only: the server runs as another user")
@pytest.mark.parametrize("name", ["labkit.conf", "postgresql.conf"])
def test_as_root_a_link_the_servers_user_puts_in_the_data_folder_is_replaced_its_target_untouched(own_server, name):
    """The data folder is the server's user's: a link it plants where labkit writes must not hand root's file over."""
    own_server.stop()
    victim = own_server.home / "root-only"
    victim.write_text("root's\n", encoding="utf-8")
    victim.chmod(0o600)
    planted = own_server.data_dir / name
    kept = planted.read_text(encoding="utf-8")
    planted.unlink()
    if name == "postgresql.conf":  # what the server's user had there, without labkit's include line
        victim.write_text(kept.replace(INCLUDE_LINE, ""), encoding="utf-8")
    before = victim.read_text(encoding="utf-8")
    planted.symlink_to(victim)
    own_server.start(Profile.named("ci"), watch=False)
    assert victim.read_text(encoding="utf-8") == before and victim.stat().st_uid == 0
    assert not planted.is_symlink() and planted.stat().st_uid == own_server.data_dir.stat().st_uid


def test_a_server_that_refuses_connections_is_one_line_at_start(lab, monkeypatch):
    """labkit.start() reads the running server's sizes first: a refused connection there is ServerGone, not psycopg's."""
    server = lab.server
    monkeypatch.setattr(type(server), "admin_conninfo",
                        lambda self: "host=/nonexistent-labkit-dir port=5 dbname=postgres connect_timeout=2")
    with pytest.raises(labkit.ServerGone, match="^Could not connect to the embedded lab server"):
        lab_module._below_profile(server, Profile.named("laptop"))


def test_a_cluster_whose_postgresql_conf_has_a_refused_line_still_starts():
    """An older labkit wrote client_connection_check_interval = '2s' into postgresql.conf on every OS,
    which keeps a Windows server from starting. labkit.conf, included last, overrides it; PostgreSQL
    ignores the earlier of two entries without checking its value. A value no OS accepts stands in
    here for the one Windows refuses."""
    home = Path(tempfile.mkdtemp(prefix="labkit-old conf-"))
    server = EmbeddedServer(home)
    try:
        server.start(Profile.named("ci"), watch=False)
        server.stop()
        conf = server.data_dir / "postgresql.conf"
        text = conf.read_text(encoding="utf-8").replace(INCLUDE_LINE, "")
        conf.write_text(text + "client_connection_check_interval = 'refused here'\n" + INCLUDE_LINE + "\n",
                        encoding="utf-8")
        assert server.start(Profile.named("ci"), watch=False) is True
        with psycopg.connect(server.conninfo(), connect_timeout=5) as connection:
            value = connection.execute("show client_connection_check_interval").fetchone()[0]
        assert value == ("0" if os.name == "nt" else "2s")
    finally:
        server.stop(mode="immediate")
        shutil.rmtree(home, ignore_errors=True)


def _wait_for(condition, seconds: float = 20):
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.2)
    return condition()


def test_watchdog_stops_the_server_of_a_killed_kernel():
    """A kernel killed outright, as nbval kills kernels, runs no atexit: its entry stays in the kernels
    registry. The watchdog must take it for the dead process it is, drop it, stop the server and exit,
    leaving no process behind. Popen.kill is SIGKILL on Linux and macOS and TerminateProcess on Windows:
    an end with no atexit on every OS, so this runs on each."""
    home = Path(tempfile.mkdtemp(prefix="labkit-killed-"))
    env = {**os.environ, "LABKIT_HOME": str(home), "LABKIT_IDLE_STOP": "1"}
    said = home / "kernel.out"
    code = ("import sys, time, labkit; lab = labkit.start('killed'); "
            "open(sys.argv[1], 'w').write(str(lab.value('select 1'))); time.sleep(300)")
    server = EmbeddedServer(home)
    kernel = subprocess.Popen([sys.executable, "-c", code, str(said)], env=env)
    try:
        assert _wait_for(lambda: (said.exists() and said.read_text() == "1") or kernel.poll() is not None, 90)
        assert kernel.poll() is None and _wait_for(lambda: server.watchdog_pid() is not None)
        entry = server.kernels.folder / f"{kernel.pid}.json"
        assert server.kernels.live() == [kernel.pid] and entry.exists()
        postmaster = psutil.Process(server.postmaster_pid())
        left = [postmaster, *postmaster.children(recursive=True), psutil.Process(server.watchdog_pid())]
        kernel.kill()
        kernel.wait()
        assert entry.exists()  # no atexit ran: the entry only the watchdog can tell is stale
        gone, alive = psutil.wait_procs(left, timeout=30)
        assert alive == [], f"still running 30 s after the kernel was killed: {alive}"
        assert not server.running() and list(server.kernels.folder.iterdir()) == []
    finally:
        if kernel.poll() is None:
            kernel.kill()
            kernel.wait()
        EmbeddedServer(home).stop(mode="immediate")
        shutil.rmtree(home, ignore_errors=True)


@contextlib.contextmanager
def watchdog_in_a_thread(server):
    """labkit.watchdog's loop for ``server``, in a thread of this process (its log handler removed at the end)."""
    import logging
    import threading

    from labkit import watchdog

    labkit_log = logging.getLogger("labkit")
    handlers, level = list(labkit_log.handlers), labkit_log.level
    watching = threading.Thread(target=watchdog.watch, args=(server.home,), daemon=True)
    watching.start()
    try:
        yield watching
    finally:
        server.stop()
        watching.join(timeout=10)
        for handler in set(labkit_log.handlers) - set(handlers):
            labkit_log.removeHandler(handler)
            handler.close()
        labkit_log.setLevel(level)


def test_the_watchdog_keeps_watching_through_restarts(own_server, monkeypatch):
    """A restart leaves no postmaster.pid for about 0.1 s: a watchdog that polls then must not take it for gone.
    Here it polls every 10 ms (2 s in use), so that every restart lands between two of its polls."""
    from labkit import watchdog

    monkeypatch.setattr(watchdog, "POLL_SECONDS", 0.01)
    own_server.pin()  # no idle stop meanwhile
    with watchdog_in_a_thread(own_server) as watching:
        assert _wait_for(lambda: own_server.watchdog_pid() == os.getpid(), 5)
        for _ in range(3):
            own_server.restart()
            assert watching.is_alive(), own_server.watchdog_log.read_text(encoding="utf-8")
        own_server.stop()
        watching.join(timeout=5)
        assert not watching.is_alive()  # and it leaves once the server is gone for good
    assert "the server is gone: exiting" in own_server.watchdog_log.read_text(encoding="utf-8")


def test_the_watchdog_stays_through_a_refused_restart_that_is_put_right(own_server, monkeypatch):
    """lab.set's restart fails (a setting the server cannot start with), then labkit puts the setting back and
    starts the server: between the two the start lock is free and the server stopped, for one poll at most."""
    from labkit import watchdog

    polls: list[bool] = []

    def between_polls(seconds):
        polls.append(own_server.running())
        if len(polls) == 1:
            own_server.start(Profile.named("ci"), watch=False)  # the setting put back, the server started again
        time.sleep(0.01)

    own_server.pin()
    own_server.stop()  # as the refused restart leaves it
    monkeypatch.setattr(watchdog, "time", types.SimpleNamespace(sleep=between_polls, monotonic=time.monotonic))
    with watchdog_in_a_thread(own_server) as watching:
        assert _wait_for(lambda: len(polls) >= 3, 10), (polls, own_server.watchdog_log.read_text(encoding="utf-8"))
        assert watching.is_alive() and polls[0] is False and own_server.running()
    assert not watching.is_alive()  # the server stopped for good: it leaves
    assert "the server is gone: exiting" in own_server.watchdog_log.read_text(encoding="utf-8")


def test_a_failed_check_is_logged_and_a_dead_watchdog_is_replaced(monkeypatch):
    home = Path(tempfile.mkdtemp(prefix="labkit-watch-"))
    server = EmbeddedServer(home)
    monkeypatch.setenv("LABKIT_IDLE_STOP", "not a number")  # the watchdog inherits it: every check fails
    try:
        server.start(Profile.named("ci"))
        assert _wait_for(lambda: server.watchdog_pid() is not None)
        first = server.watchdog_pid()
        log = server.log_dir / "watchdog.log"
        assert _wait_for(lambda: log.exists() and "a check failed" in log.read_text(encoding="utf-8"))
        time.sleep(2.5)  # a poll later, it still runs: a failed check does not end the watch
        assert server.watchdog_pid() == first and "ValueError" in log.read_text(encoding="utf-8")
        psutil.Process(first).kill()
        assert _wait_for(lambda: server.watchdog_pid() is None)
        assert server.start(Profile.named("ci")) is False  # the server still runs; its watchdog did not
        assert _wait_for(lambda: server.watchdog_pid() not in (None, first))
    finally:
        if server.watchdog_pid():
            psutil.Process(server.watchdog_pid()).kill()
        server.stop(mode="immediate")
        shutil.rmtree(home, ignore_errors=True)


@pytest.mark.skipif(sys.platform == "win32", reason="file modes (Windows: access lists, in test_platform_private_files)")
def test_a_home_whose_parents_labkit_makes_lets_the_server_in_and_no_one_else(monkeypatch):
    """labkit.start() registers its kernel, then starts the server: both may make the home and its parents."""
    from labkit.embedded import home_mode

    base = Path(tempfile.mkdtemp(prefix="labkit-parents-"))
    base.chmod(0o711)  # the test's own folder: as root, the server's user must pass through it
    home = base / "missing parent" / "home"
    server = EmbeddedServer(home)
    old = os.umask(0o002)
    try:
        server.register_kernel()  # as labkit.start() does, first
        server.start(Profile.named("ci"), watch=False)
        assert server.running()
        for folder in (home, home.parent):
            assert stat.S_IMODE(folder.stat().st_mode) == home_mode(), (folder, oct(folder.stat().st_mode))
    finally:
        os.umask(old)
        server.unregister_kernel()
        server.stop(mode="immediate")
        shutil.rmtree(base, ignore_errors=True)


@contextlib.contextmanager
def private_lab(notebook: str):
    """A lab on a server of the test's own (which the test may stop), stopped and removed at the end."""
    home = Path(tempfile.mkdtemp(prefix=f"labkit-{notebook}-"))
    server = EmbeddedServer(home)
    try:
        server.start(Profile.named("ci"), watch=False)
        lab_module._create_database(server, lab_module.database_name(notebook), Profile.named("ci"), False, [])
        lab = lab_module.Lab(server, notebook, Profile.named("ci"), messages=[])
        yield lab
        lab.close()
    finally:
        server.stop(mode="immediate")
        shutil.rmtree(home, ignore_errors=True)


def test_a_stopped_server_is_server_gone_from_a_session_and_a_check_too():
    """The error contract beyond the magics: a session's next statement and lab.check say ServerGone, in one line."""
    from labkit.records import Run

    with private_lab("gone") as lab:
        assert lab.session("T1").run("select 1").message() == "SELECT 1"
        lab.server.stop()
        for attempt in (lambda: lab.session("T1").run("select 1"), lambda: lab.session("T2"),
                        lambda: lab.check("select 1 as one", run=Run("r", "gone", "ci", "now"))):
            with pytest.raises(labkit.ServerGone, match=r"^The lab server is not running .*run labkit.start\('gone'\)"):
                attempt()


def test_a_server_stopped_during_a_run_is_server_gone_and_the_run_is_kept():
    """A run whose clients the server's stop ended is not a result like another: it says the server stopped."""
    import threading

    with private_lab("gone-run") as lab:
        stopper = threading.Timer(1.5, lab.server.stop)
        stopper.start()
        with (pytest.warns(UserWarning),  # the clients aborted; the run's end could not be checked
              pytest.raises(labkit.ServerGone, match=r"^The lab server stopped during run 'cut' .*labkit.start\('gone-run'\)")):
            lab.pgbench("select pg_sleep(0.01);", name="cut", clients=2, duration=6, live=False)
        stopper.join()
        assert lab.last_run is not None and lab.last_run.name == "cut" and lab.last_run.aborted_clients


def test_bad_dsn_fails_fast_with_a_sentence(monkeypatch):
    monkeypatch.setenv("LABKIT_DSN", "host=/nonexistent-dir port=5 user=nobody dbname=x")
    started = time.monotonic()
    with pytest.raises(LabkitError, match="Could not connect to LABKIT_DSN"):
        labkit.start("external")
    assert time.monotonic() - started < 10


def test_external_server_reports_settings_it_did_not_apply(monkeypatch, lab):
    monkeypatch.setenv("LABKIT_DSN", EmbeddedServer().conninfo())
    lab.set(synchronous_commit="on")
    try:
        external = labkit.start("external")
        assert external.server.kind == "external"
        assert any("did not apply" in m and "synchronous_commit=off (server: on)" in m for m in external.messages)
        assert external.value("select current_database()") == "lab_external"
        external.close()
    finally:
        lab.set(synchronous_commit="off")


def test_docker_backend_without_an_engine_says_so_quickly(monkeypatch):
    # An engine address where none answers (also on machines that have one elsewhere).
    monkeypatch.setenv("LABKIT_BACKEND", "docker")
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    started = time.monotonic()
    with pytest.raises(LabkitError, match="LABKIT_BACKEND=docker, but no Docker engine answers"):
        labkit.start("docker")
    assert time.monotonic() - started < 10


def test_need_connections_raises_the_limit_only_when_needed(lab):
    before = int(lab.value("show max_connections"))
    lab.need_connections(10)
    assert int(lab.value("show max_connections")) == before
    lab.need_connections(before)
    after = int(lab.value("show max_connections"))
    assert after > before
    assert any("Raised max_connections" in message for message in lab.messages)
    lab.set(max_connections=before)


def test_doctor_reports_whether_the_external_server_answers(lab, monkeypatch, capsys):
    from labkit.__main__ import main

    monkeypatch.setenv("LABKIT_DSN", lab.server.admin_conninfo())
    assert main(["doctor"]) == 0
    server_line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("server "))
    assert "(LABKIT_DSN) answers: PostgreSQL 18" in server_line
    monkeypatch.setenv("LABKIT_DSN", "host=127.0.0.1 port=1 user=nobody dbname=none connect_timeout=2")
    assert main(["doctor"]) == 0
    server_line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("server "))
    assert "127.0.0.1:1 (LABKIT_DSN) does not answer: " in server_line and "Connection refused" in server_line


def test_a_bigger_profile_is_applied_when_no_other_notebook_uses_the_server_else_said(monkeypatch, capsys):
    """A server of its own runs under ci (128MB, 300 connections); a notebook asks for laptop."""
    home = Path(tempfile.mkdtemp(prefix="labkit profile home "))
    monkeypatch.setenv("LABKIT_HOME", str(home))
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        labkit.start("profile-ci", profile="ci")
        server = EmbeddedServer(home)
        server.kernels.add(other.pid)  # another notebook's kernel uses it
        laptop = labkit.start("profile-laptop", profile="laptop")
        said = "The server runs with smaller settings than the 'laptop' profile's (max_connections 300, laptop asks " \
               "600; shared_buffers 128MB, laptop asks 256MB): another notebook uses it, so they were not changed"
        assert any(message.startswith(said) for message in laptop.messages)
        assert said in capsys.readouterr().out  # in the cell's output, not only in lab.messages
        assert laptop.value("show shared_buffers") == "128MB"
        server.kernels.remove(other.pid)  # that notebook is closed now
        again = labkit.start("profile-laptop", profile="laptop")
        assert "Applied the 'laptop' profile's settings (max_connections 300, laptop asks 600; shared_buffers 128MB, " \
               "laptop asks 256MB) with a restart: no other notebook was using the server." in again.messages
        assert again.value("show shared_buffers") == "256MB" and again.value("show max_connections") == "600"
        run = again.pgbench("select 1;", clients=1, duration=1, live=False)
        assert run.server["settings"]["shared_buffers"] in ("256MB", "32768")  # the record keeps what it ran with
        ci = labkit.start("profile-ci-again", profile="ci")
        assert not [message for message in ci.messages if "smaller settings" in message or "Applied" in message]
    finally:
        other.kill()
        other.wait()
        for name in ("profile-ci", "profile-laptop", "profile-ci-again"):  # the next test's lab is the session's
            started = lab_module._LABS.pop(name, None)
            if started is not None:
                started.close()
                lab_module._CURRENT.remove(started)
        EmbeddedServer(home).stop(mode="immediate")
        shutil.rmtree(home, ignore_errors=True)
