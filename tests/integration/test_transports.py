"""The embedded server as Windows gets it, run here: TCP on 127.0.0.1 with a generated password.

Also what a student sees when the server is gone (one line, what to do). The server's home has
a space and a non-ASCII letter in its name.
"""

import os
import shutil
import stat
import tempfile
from pathlib import Path

import psutil
import psycopg
import pytest

from labkit import lab as lab_module
from labkit.embedded import EmbeddedServer
from labkit.errors import ServerGone
from labkit.profiles import Profile

pytestmark = pytest.mark.integration
CI = Profile.named("ci")


@pytest.fixture(scope="module")
def tcp_lab():
    home = Path(tempfile.mkdtemp(prefix="labkit tcp ü-"))
    server = EmbeddedServer(home, transport="tcp")
    try:
        assert server.start(CI, watch=False) is True
        messages = []
        lab_module._create_database(server, lab_module.database_name("tcp"), CI, False, messages)
        lab = lab_module.Lab(server, "tcp", CI, messages=messages)
        yield lab
        lab.close()
    finally:
        server.stop(mode="immediate")
        shutil.rmtree(home, ignore_errors=True)


def test_tcp_listens_on_loopback_only_with_a_private_password(tcp_lab):
    server = tcp_lab.server
    listening = {(c.laddr.ip, c.laddr.port) for c in psutil.Process(server.postmaster_pid()).net_connections("inet")
                 if c.status == psutil.CONN_LISTEN}
    assert listening == {("127.0.0.1", server.port)}
    # Only its owner may read it: its mode, or on Windows (no modes) an access list of its own for the user and SYSTEM.
    if os.name == "nt":
        from labkit import _windows

        user = _windows.security().user_sid()
        dacl = _windows.parse_dacl(_windows.security().read(server.password_file), user)
        assert dacl.protected and {(ace.kind, ace.sid) for ace in dacl.aces} == {("A", user), ("A", "S-1-5-18")}
    else:
        assert stat.S_IMODE(server.password_file.stat().st_mode) == 0o600
    assert not list(server.data_dir.glob("*.log")), "the server log belongs outside the data folder"
    assert server.log_file.exists()
    without_password = f"host=127.0.0.1 port={server.port} user=postgres dbname=postgres connect_timeout=5"
    with pytest.raises(psycopg.OperationalError, match="password"):
        psycopg.connect(without_password)
    assert tcp_lab.value("select current_setting('listen_addresses')") == "127.0.0.1"


def test_pgbench_reaches_it_without_a_secret_in_its_command_line(tcp_lab):
    tcp_lab.sql("create table if not exists t (id int primary key, n int); insert into t values (1, 0) "
                "on conflict do nothing")
    run = tcp_lab.pgbench("update t set n = n + 1 where id = 1;", name="tcp", clients=2, duration=1, live=False)
    assert run.transactions > 0 and run.errors == []
    assert not [word for word in run.argv if tcp_lab.server._password() in word or "password" in word]


def test_a_stopped_server_is_one_line_that_says_what_to_do(tcp_lab):
    tcp_lab.server.stop(mode="immediate")
    try:
        with pytest.raises(ServerGone, match=r"not running .* run labkit.start\('tcp'\) again"):
            tcp_lab.sql("select 1")
        with pytest.raises(ServerGone):
            tcp_lab.pgbench("select 1;", clients=1, duration=1, live=False)
    finally:
        tcp_lab.close()
        tcp_lab.server.start(CI, watch=False)
    assert tcp_lab.value("select 1") == 1  # the next start recovers, on a new free port


def test_a_restart_whose_port_another_program_took_starts_on_another(tcp_lab):
    import socket

    server = tcp_lab.server
    tcp_lab.close()
    server.stop()
    taken = server.port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as other:  # another program listens there meanwhile
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers do: the server's closed connections wait
        other.bind(("127.0.0.1", taken))
        other.listen()
        server.restart()
        assert server.running() and server.port != taken
    assert tcp_lab.value("select current_setting('port')::int") == server.port
