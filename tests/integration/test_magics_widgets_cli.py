"""The notebook surface: %%sql and %%pgbench in an IPython shell, the panel, the CLI."""

import json
import subprocess
import sys
import time

import pytest
from IPython.core.error import UsageError as IPythonUsageError
from IPython.testing import globalipapp

import labkit
from labkit.embedded import EmbeddedServer
from labkit.magics import LabMagics, register_once
from labkit.sessions import Waiting
from labkit.widgets import panel
from tests import utf8_child

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def shell(lab):
    ip = globalipapp.get_ipython()  # the one global shell (start_ipython returns None after the first call)
    register_once(ip)
    register_once(ip)  # a second labkit.start() in the same kernel registers nothing more
    assert sum(isinstance(m, LabMagics) for m in ip.magics_manager.registry.values()) == 1
    labkit.start("tests")  # the magics use the lab started last
    return ip


def test_sql_magic_returns_a_frame_and_stores_it(shell):
    frame = shell.run_cell_magic("sql", "--out answer", "select 42 as answer")
    assert frame.loc[0, "answer"] == 42
    assert shell.user_ns["answer"].equals(frame)


def test_sql_magic_prints_errors_in_one_line(shell, capsys):
    assert shell.run_cell_magic("sql", "", "select * from nowhere") is None
    err = capsys.readouterr().err
    assert err.strip() == 'ERROR:  relation "nowhere" does not exist'


def test_sql_magic_sessions_block_and_report(shell, hot_row, capsys):
    shell.run_cell_magic("sql", "--session M1", "begin; update hot set n = n + 1 where id = 1;")
    shell.run_cell_magic("sql", "--session M2", "update hot set n = n + 1 where id = 1;  -- BLOCKS")
    assert "M2 is waiting for a lock held by M1" in capsys.readouterr().out
    shell.run_cell_magic("sql", "--session M1", "commit;")
    out = capsys.readouterr().out
    assert "M1: COMMIT" in out and "Meanwhile M2's waiting statement finished" in out and "M2: UPDATE 1" in out


def test_pgbench_magic_runs_and_refuses_bad_options(shell, hot_row):
    run = shell.run_cell_magic("pgbench", "-c 2 -T 2 --name magic", "update hot set n = n + 1 where id = 1;")
    assert run.name == "magic" and run.transactions > 0
    with pytest.raises(IPythonUsageError, match="Unknown pgbench option '--bogus'"):
        shell.run_cell_magic("pgbench", "--bogus", "select 1;")
    with pytest.raises(IPythonUsageError, match="--probes nothing: define it first"):
        shell.run_cell_magic("pgbench", "-c 1 -T 1 --probes nothing", "select 1;")


def test_a_labkit_error_in_a_code_cell_is_one_line_as_in_a_magics(shell, capsys):
    """16 notebook cells call lab.pgbench directly: a usage mistake there reads as %%pgbench -c 0 does."""
    shell.user_ns["lab"] = labkit.lab.current_lab()
    capsys.readouterr()
    result = shell.run_cell("lab.pgbench('select 1;', clients=0)")
    assert isinstance(result.error_in_exec, labkit.UsageError)  # the cell still failed (nbval sees it)
    captured = capsys.readouterr()
    assert captured.err == "UsageError: -c must be at least 1.\n" and "Traceback" not in captured.out, captured
    result = shell.run_cell("1 / 0")  # anything else keeps its traceback
    assert isinstance(result.error_in_exec, ZeroDivisionError) and "Traceback" in capsys.readouterr().out


def test_a_server_that_will_not_start_is_one_line_in_a_fresh_kernel(shell, capsys, monkeypatch):
    """labkit.start() is a notebook's first cell: its own failure must already read as one line."""
    from labkit import lab as lab_module

    class WillNotStart:
        def register_kernel(self):
            pass

        def unregister_kernel(self):
            pass

        def reap_orphans(self):
            return []

        def start(self, profile):
            raise labkit.ServerStartFailed("The lab server did not start: a test said so.")

    saved = shell.custom_exceptions, shell.CustomTB
    shell.set_custom_exc((), None)  # a kernel where labkit has not yet registered anything
    monkeypatch.setattr(lab_module, "server_for_backend", WillNotStart)
    try:
        capsys.readouterr()
        result = shell.run_cell("import labkit; labkit.start('never-started')")
        assert isinstance(result.error_in_exec, labkit.ServerStartFailed)
        captured = capsys.readouterr()
        assert "Traceback" not in captured.out + captured.err, captured
        assert "The lab server did not start: a test said so." in captured.err
    finally:
        shell.set_custom_exc(*saved)


def test_the_magic_and_lab_pgbench_share_the_profiles_defaults(shell, lab):
    """Without -c, %%pgbench runs the profile's clients (it used 1); Lab.pgbench's options are obeyed."""
    run = shell.run_cell_magic("pgbench", "-t 3 --name magic-defaults", "select 1;")
    assert (run.clients, run.transactions, run.duration_s) == (lab.profile.clients, 3 * lab.profile.clients, None)
    run = lab.pgbench("select 1;", name="options-obeyed", options="-c 2 -t 5", live=False)
    assert (run.clients, run.transactions) == (2, 10)


def test_pgbench_magic_records_goodput(shell, hot_row):
    shell.user_ns["evens"] = "select n / 2 from hot where id = 1"
    run = shell.run_cell_magic("pgbench", "-c 2 -T 4 --name halves --work evens",
                               "update hot set n = n + 1 where id = 1;")
    assert run.extra["useful"] == pytest.approx(0.5, abs=0.01)  # exact counts over the whole run
    # over the steady phase: the work counter is sampled once a second and read between samples at the
    # phase's ends, tps from pgbench's progress lines; a busy machine's uneven seconds part them a little
    assert run.extra["goodput_basis"] == "steady phase"
    assert run.extra["goodput"] == pytest.approx(run.tps / 2, rel=0.05)
    assert [row["t"] for row in run.probes["work"]] == sorted(row["t"] for row in run.probes["work"])
    with pytest.raises(IPythonUsageError, match="--work nothing: define it first"):
        shell.run_cell_magic("pgbench", "-c 1 -T 1 --work nothing", "select 1;")
    shell.user_ns["broken"] = "select count(*) from nowhere"
    with pytest.raises(IPythonUsageError, match='The work query failed: relation "nowhere" does not exist'):
        shell.run_cell_magic("pgbench", "-c 1 -T 1 --work broken", "select 1;")


def test_pgbench_magic_runs_its_setup_first(shell, lab, hot_row):
    lab.sql("update hot set n = 1000 where id = 1")
    shell.user_ns["restart_count"] = "update hot set n = 0 where id = 1"
    run = shell.run_cell_magic("pgbench", "-c 2 -t 50 --name counted --setup restart_count",
                               "update hot set n = n + 1 where id = 1;")
    assert lab.value("select n from hot where id = 1") == run.transactions == 100
    with pytest.raises(IPythonUsageError, match="--setup nothing: define it first as SQL to run before pgbench"):
        shell.run_cell_magic("pgbench", "-c 1 -T 1 --setup nothing", "select 1;")


def test_sql_magic_waits_out_a_short_lock_timeout(shell, hot_row, capsys):
    shell.run_cell_magic("sql", "--session W1", "begin; update hot set n = n + 1 where id = 1;")
    shell.run_cell_magic("sql", "--session W2 --lock-timeout 500ms", "update hot set n = n + 1 where id = 1;")
    assert "canceling statement due to lock timeout" in capsys.readouterr().err
    shell.run_cell_magic("sql", "--session W1", "commit;")


def _timeouts(shell, session: str) -> tuple[str, str]:
    frame = shell.run_cell_magic("sql", f"--session {session}",
                                 "select current_setting('lock_timeout') as l, current_setting('statement_timeout') as s")
    return frame.loc[0, "l"], frame.loc[0, "s"]


def test_a_cells_timeouts_apply_to_that_cell_only(shell):
    frame = shell.run_cell_magic("sql", "--session K1 --lock-timeout 1s --statement-timeout 7s",
                                 "select current_setting('lock_timeout') as l, current_setting('statement_timeout') as s")
    assert (frame.loc[0, "l"], frame.loc[0, "s"]) == ("1s", "7s")
    assert _timeouts(shell, "K1") == ("5min", "10min")
    # A cell that opens a transaction which is then rolled back (a SET in it would be undone with it).
    shell.run_cell_magic("sql", "--session K1 --lock-timeout 1s", "begin; select 1;")
    shell.run_cell_magic("sql", "--session K1", "rollback;")
    assert _timeouts(shell, "K1") == ("5min", "10min")
    # Inside a transaction: that cell only, not the rest of the transaction nor after it.
    shell.run_cell_magic("sql", "--session K1", "begin;")
    assert _timeouts(shell, "K1 --lock-timeout 2s") == ("2s", "10min")
    assert _timeouts(shell, "K1") == ("5min", "10min")
    shell.run_cell_magic("sql", "--session K1", "commit;")
    assert _timeouts(shell, "K1") == ("5min", "10min")
    # A failed transaction can still be rolled back from a cell that gives a timeout.
    shell.run_cell_magic("sql", "--session K1", "begin; select 1 / 0;")
    shell.run_cell_magic("sql", "--session K1 --lock-timeout 1s", "rollback;")
    assert _timeouts(shell, "K1") == ("5min", "10min")
    # The session's own setting, made in SQL, is what comes back after the cell.
    shell.run_cell_magic("sql", "--session K1", "set lock_timeout = '3s';")
    shell.run_cell_magic("sql", "--session K1 --lock-timeout 1s", "select 1;")
    assert _timeouts(shell, "K1") == ("3s", "10min")
    shell.run_cell_magic("sql", "--session K1 --lock-timeout 1s", "begin; set lock_timeout = '4s'; commit;")
    assert _timeouts(shell, "K1") == ("4s", "10min")


def test_a_cell_on_a_busy_session_returns_at_once(shell, hot_row, capsys):
    shell.run_cell_magic("sql", "--session Q1", "begin; update hot set n = n + 1 where id = 1;")
    lab = labkit.lab.current_lab()
    lab.session("Q2", lock_timeout="3s")  # were the cell below to wait for Q2, it would wait 3 s, not 5 minutes
    try:
        assert isinstance(lab.session("Q2").run("update hot set n = n + 1 where id = 1;"), Waiting)
        started = time.monotonic()
        with pytest.raises(IPythonUsageError, match=r"^Q2 is still running its previous statement"):
            shell.run_cell_magic("sql", "--session Q2 --lock-timeout 2s", "select 1;")
        assert time.monotonic() - started < 1
    finally:
        shell.run_cell_magic("sql", "--session Q1", "rollback;")
    capsys.readouterr()


def test_sql_magic_says_the_server_is_gone_in_one_line(shell, capsys):
    lab = labkit.lab.current_lab()
    shell.run_cell_magic("sql", "", "select 1;")
    shell.run_cell_magic("sql", "--session G1", "select 1;")
    lab.server.stop()
    try:
        for line in ("", "--session G1", "--session G2"):  # the main session, a session made before, a new one
            with pytest.raises(IPythonUsageError) as raised:
                shell.run_cell_magic("sql", line, "select 1;")
            assert str(raised.value) == "The lab server is not running (it was stopped, or the computer slept): " \
                                        "run labkit.start('tests') again.", line
    finally:
        lab.server.start(lab.profile)
    capsys.readouterr()
    assert shell.run_cell_magic("sql", "--session G1", "select 1 as one").loc[0, "one"] == 1
    assert capsys.readouterr().out.startswith("(G1 connected again: the lab server had restarted")


def test_panel_with_methods_names_the_run(lab, hot_row):
    box = panel(lab, {"one": "update hot set n = n + 1 where id = 1;", "two": "select 2;"}, name="pick",
                clients=(1, 2), duration=(1, 1), work="select n from hot where id = 1")
    box.methods.value = "two"
    box.run()
    assert box.message.value.startswith("pick-two-c2:") and "goodput 0/s" in box.message.value
    first = box.views[0]  # the run's live view ended in its own Output, which the panel shows
    assert first.widget.comm is None and first.output.comm is not None
    box.run()  # the next run clears the panel: the last run's Output is closed with it
    assert first.output.comm is None and box.views[0] is not first and box.views[0].output.comm is not None


def test_panel_refuses_out_of_range_and_runs(lab, hot_row):
    box = panel(lab, "update hot set n = n + :step where id = 1;", name="panel", clients=(1, 4),
                duration=(1, 2), knobs={"step": [1, 2]},
                after=lambda lab, run: lab.check("select n as n_after from hot where id = 1", run))
    box.clients.value = 50
    box.run()
    assert "between 1 and 4" in box.message.value
    box.clients.value = 2
    box.knobs["step"].value = 2
    box.run()
    assert box.message.value.startswith("panel-c2-step-2:") and "tps with 2 clients" in box.message.value
    run = lab.records(["panel-c2-step-2"])[0]  # the record is named by the choices and keeps them
    assert run.clients == 2 and run.extra["step"] == 2
    assert run.extra["n_after"] == lab.sql("select n from hot where id = 1").iloc[0, 0] > 0  # after= noted its check
    assert lab.runs().set_index("run").loc["panel-c2-step-2", "step"] == 2


def test_cli_status_and_pgbench(tmp_path):
    status = subprocess.run([sys.executable, "-m", "labkit", "server", "status"], capture_output=True, encoding="utf-8", errors="replace",
                            check=True, env=utf8_child())
    assert "backend:  embedded (running)" in status.stdout
    uri = "postgresql://postgres@127.0.0.1:" if EmbeddedServer().transport == "tcp" else "postgresql://postgres@/postgres?host="
    assert f"uri:      {uri}" in status.stdout
    script = tmp_path / "one.sql"
    script.write_text("select 1;\n")
    out = tmp_path / "run.json"
    result = subprocess.run([sys.executable, "-m", "labkit", "pgbench", "-c", "2", "-T", "2", "-f", str(script),
                             "--name", "cli-run", "--json", str(out)], capture_output=True, encoding="utf-8", errors="replace",
                            env=utf8_child(), timeout=60)
    assert result.returncode == 0, result.stderr
    assert "progress: 1.0 s" in result.stdout
    assert json.loads(out.read_text())["name"] == "cli-run"
    bad = subprocess.run([sys.executable, "-m", "labkit", "pgbench", "--bogus"], capture_output=True, encoding="utf-8", errors="replace",
                         env=utf8_child(), timeout=60)
    assert bad.returncode == 2 and bad.stderr.startswith("error: Unknown pgbench option '--bogus'")


def test_cli_doctor():
    result = subprocess.run([sys.executable, "-m", "labkit", "doctor"], capture_output=True, encoding="utf-8", errors="replace", check=True,
                            env=utf8_child(), timeout=120)
    assert "embedded PostgreSQL" in result.stdout and "pgbench (PostgreSQL) 18" in result.stdout
    assert "perf" in result.stdout and "docker engine" in result.stdout
