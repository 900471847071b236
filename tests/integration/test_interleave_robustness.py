"""Interleavings when things go wrong: a backend that dies, a cell interrupted, a server restarted between cells.

Each ends with the isolation tester's own text or one clear line, and the next ``%%sql`` and
``%%steps`` cells work.
"""

from pathlib import Path

import pytest
from IPython.core.error import UsageError as IPythonUsageError

from labkit import interleave

pytestmark = pytest.mark.integration

# s1's backend is ended by s2 while s1 is idle (s2 waits until it has gone); s1 then asks for a lock s2 will want
KILLED_WHILE_IDLE = """
setup { create table if not exists idle_kill (id int primary key); truncate idle_kill; insert into idle_kill values (1);
        create table if not exists idle_kill_pids (name text primary key, pid int); truncate idle_kill_pids; }
teardown { drop table idle_kill, idle_kill_pids; }
session s1
setup { insert into idle_kill_pids values ('s1', pg_backend_pid()); }
step s1lock { update idle_kill set id = id where id = 1; }
step s1q { select 1 as one; }
session s2
setup { begin; }
step s2kill { select pg_terminate_backend(pid) as ended from idle_kill_pids where name = 's1'; }
step s2gone { do $$ begin while exists (select from pg_stat_activity a join idle_kill_pids p on a.pid = p.pid)
               loop perform pg_sleep(0.01); perform pg_stat_clear_snapshot(); end loop; end $$; }
step s2u { update idle_kill set id = id where id = 1; }
step s2c { commit; }
permutation s2kill s2gone s1lock s2u s2c
"""


@pytest.fixture
def magics(lab):
    from IPython.testing import globalipapp

    import labkit
    from labkit import lab as lab_module

    shell = globalipapp.get_ipython()
    labkit.load_ipython_extension(shell)
    # the magics use the lab started last: this module's, whatever another module in this process started
    if lab in lab_module._CURRENT:
        lab_module._CURRENT.remove(lab)
    lab_module._CURRENT.append(lab)
    return shell.magics_manager.registry["LabMagics"]


def test_a_session_ended_while_idle_reports_the_fatal_error_at_its_next_step_as_the_tester_does(lab):
    # the timeout is never reached when all goes well; long enough for a killed backend to leave on a busy machine
    outcome = interleave.run(lab, KILLED_WHILE_IDLE, step_timeout_s=60)
    lines = outcome.text.splitlines()
    at = lines.index("step s1lock: update idle_kill set id = id where id = 1;")
    assert lines[at + 1:at + 5] == [
        "FATAL:  terminating connection due to administrator command",
        "server closed the connection unexpectedly",
        "\tThis probably means the server terminated abnormally",
        "\tbefore or while processing the request.",
    ]
    assert "isolationtester: canceling step" not in outcome.text  # s2u was never left waiting for a dead session
    # the session is the lab's again in the next cell: connected anew
    assert lab.session("s1").run("select 2 as two").frame.iloc[0]["two"] == 2


def test_an_interrupted_steps_cell_leaves_the_sessions_ready_for_the_next_sql_and_steps_cells(lab, magics,
                                                                                               monkeypatch, capsys):
    from labkit import magics as magics_module

    spec = """
setup { create table if not exists interrupted (id int primary key); truncate interrupted; insert into interrupted values (1); }
teardown { drop table interrupted; }
session s1
setup { begin; }
step s1u { update interrupted set id = id where id = 1; }
step s1c { commit; }
session s2
step s2u { update interrupted set id = id where id = 1; }
permutation s1u s2u s1c
"""
    original = magics_module._StepsWatch.event

    def interrupt_once_waiting(self, run):
        original(self, run)
        if any(line.endswith("<waiting ...>\n") for line in run.lines):
            raise KeyboardInterrupt

    monkeypatch.setattr(magics_module._StepsWatch, "event", interrupt_once_waiting)
    with pytest.raises((KeyboardInterrupt, IPythonUsageError)):
        magics.steps("--no-lanes", spec)
    monkeypatch.setattr(magics_module._StepsWatch, "event", original)
    capsys.readouterr()
    assert magics.sql("--session main", "select 3 as three").iloc[0]["three"] == 3
    assert magics.sql("--session s2", "select 4 as four").iloc[0]["four"] == 4
    magics.steps("--no-lanes", spec)
    assert "step s2u: <... completed>\n" in capsys.readouterr().out
    assert lab.sessions.open_transactions() == []


OWN = Path(__file__).resolve().parents[1] / "data" / "isolation" / "own"


def test_a_spec_whose_steps_end_backends_prints_the_testers_text_and_the_next_cells_work(lab, magics, capsys):
    magics.steps("--no-lanes --timeout 2", (OWN / "kill-in-step.spec").read_text(encoding="utf-8"))
    printed = capsys.readouterr().out
    assert "step s2_wait: <... completed>\nFATAL:  terminating connection due to administrator command\n" in printed
    assert "step s1_exit: select pg_terminate_backend(pg_backend_pid());\nFATAL:  terminating connection" in printed
    assert "teardown of session s1 failed: no connection to the server\n" in printed
    assert printed.endswith("setup of session s1 failed: no connection to the server\n"
                            "(The isolation tester exits there (setup of session s1 failed). Then labkit ended the "
                            "steps still running and ran the teardowns, which the isolation tester leaves undone.)\n")
    assert lab.value("select count(*) from pg_tables where tablename in ('kill_t', 'kill_pids')") == 0
    for name in ("s1", "s2", "s3"):  # the ended sessions connect again in the next cell
        assert magics.sql(f"--session {name}", f"select '{name}' as name").iloc[0]["name"] == name
    magics.steps("--no-lanes", "session s1\nstep s1a { select 'again' as s1; }")
    assert "step s1a: select 'again' as s1;\ns1   \n-----\nagain\n(1 row)\n" in capsys.readouterr().out


def test_a_server_restart_between_cells_leaves_steps_and_sql_cells_working(lab, magics, capsys):
    spec = "session s1\nsetup { begin; }\nstep s1a { select 1 as one; }\nstep s1c { commit; }\n"
    magics.steps("--no-lanes", spec)
    lab.server.restart()
    capsys.readouterr()
    magics.steps("--no-lanes", spec)
    assert "step s1c: commit;\n" in capsys.readouterr().out
    assert magics.sql("--session s1", "select 5 as five").iloc[0]["five"] == 5


def test_a_server_that_is_gone_is_one_line_from_a_steps_cell(lab, magics, monkeypatch):
    import psycopg

    from labkit import db

    def refuse(*args, **kwargs):
        raise psycopg.OperationalError("connection is bad: no such server")

    monkeypatch.setattr(db, "connect", refuse)
    monkeypatch.setattr(lab.server, "running", lambda: False)
    with pytest.raises(IPythonUsageError, match=r"^The lab server is not running .*: run labkit.start\("):
        magics.steps("--no-lanes", "session s1\nstep s1a { select 1; }")


def test_a_server_that_is_gone_is_one_line_from_lab_steps_too(lab, monkeypatch):
    """A code cell's ``lab.steps(...)`` keeps the magic's contract: ServerGone, one line, not psycopg's error."""
    import psycopg

    from labkit import db
    from labkit.errors import ServerGone

    def refuse(*args, **kwargs):
        raise psycopg.OperationalError("connection is bad: no such server")

    monkeypatch.setattr(db, "connect", refuse)
    monkeypatch.setattr(lab.server, "running", lambda: False)
    with pytest.raises(ServerGone, match=r"^The lab server is not running .*: run labkit.start\("):
        lab.steps("session s1\nstep s1a { select 1; }")
