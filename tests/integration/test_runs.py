"""pgbench runs against the real server: records, probes, errors, interrupts."""

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
import psycopg
import pytest

import labkit
from labkit import records, runner
from labkit.errors import LabkitError, RunFailed, UsageError

pytestmark = pytest.mark.integration


def pgbench_children():
    return [p for p in psutil.Process().children(recursive=True) if p.name() in ("pgbench", "pgbench.exe")]


def assert_interrupts_reach_this_thread():
    """Ctrl+C raises KeyboardInterrupt here (nothing earlier in this process replaced Python's own handler)."""
    assert threading.current_thread() is threading.main_thread()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler, signal.getsignal(signal.SIGINT)


def terminate_backend(lab, pid):
    with psycopg.connect(lab.conninfo, autocommit=True) as connection:
        connection.execute("select pg_terminate_backend(%s)", (int(pid),))


def leftover_backends(lab):
    return lab.value("select count(*) from pg_stat_activity where application_name like 'labkit-run-%'")


def test_run_with_probes_is_recorded(lab, hot_row):
    counter = labkit.probe("updates", "select n from hot where id = 1", every=0.5)
    run = lab.pgbench("update hot set n = n + 1 where id = 1;", name="hot", clients=4, duration=3,
                      probes=[labkit.WAIT_EVENTS, counter])
    assert run.transactions > 0 and run.failures == 0
    # pgbench may skip the last progress line when it coincides with the end of -T
    assert [p["t"] for p in run.per_second] in ([1.0, 2.0], [1.0, 2.0, 3.0])
    assert run.fine_width_s == 0.1 and 25 <= len(run.fine) <= 31
    assert 0 < run.latency_ms["p50"] <= run.latency_ms["p99"] <= run.latency_ms["max"]
    waits = {sample["t"] for sample in run.probes["waits"]}
    assert len(waits) >= 8  # every 250 ms over 3 s
    values = [sample["n"] for sample in run.probes["updates"]]
    assert values == sorted(values) and values[-1] > values[0]
    saved = json.loads(Path(run.path).read_text(encoding="utf-8"))
    assert saved["name"] == "hot" and saved["clients"] == 4 and saved["server"]["version"].startswith("18")
    assert not [word for word in saved["argv"] if "host=" in word or "dbname" in word]  # the server is in libpq's environment
    assert saved["wall_s"] >= 3 and saved["overrun_s"] < 2
    assert lab.value("select n from hot where id = 1") == run.transactions


def test_several_weighted_scripts(lab, hot_row, tmp_path):
    (tmp_path / "write.sql").write_text("update hot set n = n + 1 where id = 1;\n")
    (tmp_path / "read.sql").write_text("select n from hot where id = 1;\n")
    run = lab.pgbench(name="mixed", clients=2, duration=2,
                      options=["-f", f"{tmp_path}/write.sql@3", "-f", f"{tmp_path}/read.sql@1"])
    commands = {statement["command"] for statement in run.statements}
    assert commands == {"update hot set n = n + 1 where id = 1;", "select n from hot where id = 1;"}


def test_sql_error_in_the_script_shows_pgbench_message(lab):
    with pytest.raises(RunFailed, match='pgbench stopped: ERROR:  relation "missing_table" does not exist'):
        lab.pgbench("select * from missing_table;", name="broken", clients=2, duration=2)


def test_a_timed_run_that_completes_no_transaction_says_why_at_its_own_cell(lab):
    # What an overloaded machine gave (eight students' runs of 256 clients at once on 2 cores): a run that
    # completed no transaction. A real one here: pgbench's schedule (-R) of one transaction per 2,000 s
    # starts none in the run's second (about 1 in 2,000 that it does).
    with pytest.raises(RunFailed, match="Run 'stuck' completed no transaction in its 1 s with 2 clients"):
        lab.pgbench("select 1;", name="stuck", clients=2, duration=1, options="-R 0.0005", live=False, probes=[])
    stuck = lab.last_run
    assert (stuck.name, stuck.transactions, stuck.interrupted, stuck.errors) == ("stuck", 0, False, [])
    assert records.Run.load(stuck.path).transactions == 0  # nothing lost: pgbench's record is saved
    held = lab.pgbench("select 1;", name="held", clients=2, duration=1, options="-R 0.0005", live=False,
                       probes=[], hold_sessions=True)  # waiting on purpose: no error
    assert held is lab.last_run and (held.name, held.transactions) == ("held", 0)


def test_work_sql_is_run_as_written_comments_and_semicolons_included(lab, hot_row):
    """A work query as a student writes it in a cell: a trailing comment, a semicolon before it."""
    work = "select n from hot where id = 1; -- the updates done so far"
    run = lab.pgbench("update hot set n = n + 1 where id = 1;", name="work-comment", clients=1, duration=2,
                      probes=[], work=work)
    assert "work" not in run.extra.get("probe_errors", {}), run.extra.get("probe_errors")
    assert run.extra["work"] == run.transactions > 0  # each transaction adds one
    assert len(run.probes["work"]) >= 1 and all(set(row) == {"t", "work"} for row in run.probes["work"])
    with pytest.raises(UsageError, match="The work query returns 2 columns: it must return one number"):
        lab.pgbench("select 1;", name="work-two", clients=1, duration=1, probes=[], work="select 1, 2")


def test_a_work_count_that_blocks_after_the_run_is_given_up_and_the_run_kept(lab, hot_row, monkeypatch, caplog):
    """The last count runs while Ctrl+C is held: one that waits (a lock on its table) must not hang the kernel."""
    from labkit import runner

    monkeypatch.setattr(runner, "WORK_AFTER_TIMEOUT_S", 1)
    lab.sql("update hot set n = 0 where id = 1")
    work = "select n from hot, pg_sleep(case when n > 0 then 5 else 0 end) where id = 1"  # slow once updated
    run = lab.pgbench("update hot set n = n + 1 where id = 1;", name="work-blocked", clients=1, duration=2,
                      probes=[], work=work)
    assert run.transactions > 0 and "work" not in run.extra
    assert "no work figures: The work query failed: canceling statement due to statement timeout" in caplog.text


def test_too_many_clients(lab):
    limit = int(lab.value("show max_connections"))
    with pytest.raises(UsageError, match=f"{limit + 10} clients need .*need_connections"):
        lab.pgbench("select 1;", clients=limit + 10, duration=1)


def release_once_blocked(conninfo: str, holder_pid: int, clients: int, hold_s: float) -> threading.Event:
    """Ends the holder ``hold_s`` after ``clients`` backends are seen waiting on a lock (set the event: give up).

    Timed from the wait seen, not from before the run: on a busy machine pgbench can start a second late.
    """
    cancelled = threading.Event()

    def release():
        with psycopg.connect(conninfo, autocommit=True) as connection:
            deadline = time.monotonic() + 60
            while not cancelled.is_set() and time.monotonic() < deadline:
                waiting = connection.execute("select count(*) from pg_stat_activity where wait_event_type = 'Lock' "
                                             "and datname = current_database()").fetchone()
                if waiting and waiting[0] >= clients:
                    break
                time.sleep(0.02)
            if not cancelled.wait(hold_s):
                connection.execute("select pg_terminate_backend(%s)", (holder_pid,))

    threading.Thread(target=release, daemon=True).start()
    return cancelled


def test_a_stall_and_the_overrun_it_causes(lab, hot_row):
    holder = lab.session("stall-holder")
    holder.run("begin; update hot set n = n where id = 1")
    cancel = release_once_blocked(lab.conninfo, holder.pid, clients=2, hold_s=2.3)
    try:
        run = lab.pgbench("update hot set n = n + 1 where id = 1;", name="stalled", clients=2, duration=4,
                          hold_sessions=True)
    finally:
        cancel.set()
        lab.sessions.sessions.pop("stall-holder").close()
    # the first second is the start, drawn apart: the stall counts from the steady phase's first second
    assert run.stalls and run.stalls[0]["start"] == 1.0 and run.stalls[0]["end"] >= 2.0
    assert run.phases["steady_from_s"] == 1.0 and run.to_frame("start")["tps"].iloc[0] == 0
    # every client waited on the holder's lock: the record (and the live chart) say who held it
    assert run.probes["held_by"] and {row["holders"] for row in run.probes["held_by"]} == {
        "stall-holder (idle in transaction)"}, run.probes.get("held_by")
    zero_bins = [b for b in run.fine if b["tps"] == 0]
    assert len(zero_bins) >= 15  # the 100 ms bins see the 2.5 s wait too
    # both clients waited past deadlock_timeout (1 s): each ran the deadlock check and the server logged it
    logged = run.extra["lock_waits_logged"]
    assert logged["waits"] >= 2 and logged["still_waiting_lines"] >= logged["waits"] and logged["deadlocks"] == 0, logged
    assert set(logged["by_lock"]) <= {"ShareLock on transaction", "ExclusiveLock on tuple"}, logged
    assert logged["longest_wait_ms"] >= 1000, logged


def test_a_run_without_long_waits_logs_none(lab):
    run = lab.pgbench("select 1;", name="no-waits", clients=2, duration=1, live=False, probes=[])
    assert run.extra["lock_waits_logged"] == {"waits": 0, "still_waiting_lines": 0, "acquired": 0, "deadlocks": 0,
                                              "longest_wait_ms": None, "by_lock": {}}


@pytest.mark.posix
def test_interrupt_stops_pgbench_and_its_backends(lab, hot_row):
    assert_interrupts_reach_this_thread()
    holder = lab.session("int-holder")
    holder.run("begin; update hot set n = n where id = 1")  # pgbench's clients will wait on this lock
    holder_pid = holder.run("select pg_backend_pid() as pid").frame.iloc[0]["pid"]
    interrupt = threading.Timer(2.0, lambda: os.kill(os.getpid(), signal.SIGINT))
    # if the interrupt never lands, the clients would wait on the held lock for ever: end it, and the test fails
    release = threading.Timer(25.0, terminate_backend, (lab, holder_pid))
    interrupt.start()
    release.start()
    started = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            lab.pgbench("update hot set n = n + 1 where id = 1;", name="interrupted", clients=3, duration=30,
                        hold_sessions=True)
    finally:
        interrupt.cancel()  # (if the run did not even start, the interrupt must not hit the test session)
        release.cancel()
        holder.run("rollback")
    assert time.monotonic() - started < 8
    assert pgbench_children() == []
    deadline = time.monotonic() + 5
    while leftover_backends(lab) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert leftover_backends(lab) == 0
    # No transaction got through, and what was measured is kept: the waits, and who held the lock.
    run = lab.last_run
    assert run is not None and run.name == "interrupted" and run.interrupted and run.transactions == 0
    assert records.Run.load(run.path).interrupted
    assert run.probes["waits"] and {row["holders"] for row in run.probes["held_by"]} == {
        "int-holder (idle in transaction)"}, run.probes["held_by"]


def test_an_interrupt_while_a_finished_run_is_recorded_keeps_the_run(lab, monkeypatch):
    """Ctrl+C just as pgbench ends, while labkit reads what it left and makes the record."""
    real = runner.wait_backends_gone

    def interrupted_meanwhile(*args, **kwargs):
        signal.raise_signal(signal.SIGINT)
        return real(*args, **kwargs)

    monkeypatch.setattr(runner, "wait_backends_gone", interrupted_meanwhile)
    with pytest.raises(KeyboardInterrupt, match="'late-interrupt' had finished when it was interrupted"):
        lab.pgbench("select 1;", name="late-interrupt", clients=1, duration=1, probes=[], live=False)
    run = lab.last_run
    assert run is not None and run.name == "late-interrupt" and not run.interrupted and run.transactions > 0
    assert records.Run.load(run.path).transactions == run.transactions


def test_a_second_interrupt_while_pgbench_is_stopped_still_ends_its_backends(lab, hot_row, monkeypatch):
    """A student who presses Ctrl+C twice: the second lands while labkit stops pgbench."""
    from labkit import processes

    real_interrupt, ended = processes.interrupt, []
    real_terminate = runner.db.terminate_runs

    def impatient(process, *args, **kwargs):
        signal.raise_signal(signal.SIGINT)
        return real_interrupt(process, *args, **kwargs)

    def terminate(conninfo, names):
        ended.extend(names)
        return real_terminate(conninfo, names)

    monkeypatch.setattr(processes, "interrupt", impatient)
    monkeypatch.setattr(runner.db, "terminate_runs", terminate)
    holder = lab.session("int-holder-2")
    holder.run("begin; update hot set n = n where id = 1")  # pgbench's clients will wait on this lock
    interrupt = threading.Timer(2.0, lambda: signal.raise_signal(signal.SIGINT))
    interrupt.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            lab.pgbench("update hot set n = n + 1 where id = 1;", name="twice", clients=3, duration=30,
                        hold_sessions=True, live=False)
        assert len(ended) == 1 and ended[0].startswith("labkit-run-")
        assert leftover_backends(lab) == 0  # ended, not left to notice later that their client is gone
    finally:
        interrupt.cancel()
        holder.run("rollback")
    assert pgbench_children() == [] and lab.last_run.name == "twice" and lab.last_run.interrupted


def test_a_run_whose_record_cannot_be_saved_is_kept_to_save_again(lab, monkeypatch):
    """A full disk: the error says so in one sentence, and the measured run is lab.last_run, saved once there is room."""
    import errno

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(records, "_new_file", full)
    with pytest.raises(LabkitError, match=r"Could not save the record of run 'disk-full' .*No space left on device"):
        lab.pgbench("select 1;", name="disk-full", clients=1, duration=1, live=False)
    kept = lab.last_run
    assert kept is not None and kept.name == "disk-full" and kept.transactions > 0 and not kept.path
    monkeypatch.undo()
    kept.save()
    assert records.Run.load(kept.path).transactions == kept.transactions


def test_an_interrupt_before_the_output_is_read_stops_the_run_cleanly(lab, monkeypatch):
    """Ctrl+C can land between pgbench's start and the reader's: a KeyboardInterrupt, not an AttributeError."""

    def interrupted(self, process):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner._OutputReader, "__init__", interrupted)
    with pytest.raises(KeyboardInterrupt, match="interrupted after"):
        lab.pgbench("select pg_sleep(0.05);", name="early-interrupt", clients=2, duration=30, live=False)
    assert pgbench_children() == []
    assert leftover_backends(lab) == 0


def test_one_run_at_a_time(lab):
    results = {}

    def background():
        try:
            lab.pgbench("select pg_sleep(0.05);", name="first", clients=1, duration=3)
        except Exception as error:  # noqa: BLE001
            results["first"] = error

    thread = threading.Thread(target=background)
    thread.start()
    deadline = time.monotonic() + 10
    while not runner._ONE_RUN.locked() and time.monotonic() < deadline:  # the first run holds the kernel's run lock
        time.sleep(0.01)
    with pytest.raises(UsageError, match="already going on in this kernel"):
        lab.pgbench("select 1;", name="second", clients=1, duration=1)
    thread.join()
    assert "first" not in results


def test_a_run_that_cannot_make_its_log_folder_says_so_and_the_next_run_goes_ahead(lab, monkeypatch):
    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(runner.tempfile, "mkdtemp", full)
    with pytest.raises(UsageError, match="could not make a folder for the run's logs .*No space left"):
        lab.pgbench("select 1;", name="no-room", clients=1, duration=1)
    monkeypatch.undo()
    assert not runner._ONE_RUN.locked()  # the kernel's run lock was let go of
    assert lab.pgbench("select 1;", name="room-again", clients=1, duration=1).transactions > 0


@pytest.mark.linux
def test_a_killed_kernel_leaves_no_pgbench(tmp_path):
    code = ("import labkit; lab = labkit.start('tests');"
            "lab.pgbench('select pg_sleep(0.1);', name='orphan', clients=2, duration=60, live=False)")
    kernel = subprocess.Popen([sys.executable, "-c", code], env=os.environ.copy())
    deadline = time.monotonic() + 30
    children = []
    while not children and time.monotonic() < deadline:
        time.sleep(0.3)
        children = [p for p in psutil.Process(kernel.pid).children(recursive=True) if p.name() == "pgbench"]
    assert children, "pgbench did not start"
    kernel.kill()  # what nbval does to a kernel
    kernel.wait()
    gone, alive = psutil.wait_procs(children, timeout=5)
    assert alive == []


def test_a_dead_kernels_waiting_backends_are_ended_without_the_connection_check(lab, hot_row):
    """Windows has no client_connection_check_interval: a backend waiting for a lock would wait for as
    long as the lock is held after its pgbench died with its kernel. The reaper (the watchdog, or the
    next labkit.start) ends the run's backends by the run's application_name instead. Run here with
    the check off, as on Windows."""
    check = lab.value("show client_connection_check_interval")
    lab.set(client_connection_check_interval=0)
    holder = lab.session("holder")
    holder.run("begin; update hot set n = n + 1 where id = 1")
    kernel = None
    try:
        code = ("import labkit; lab = labkit.start('tests'); lab.pgbench('update hot set n = n + 1 where id = 1;', "
                "name='orphan-waits', clients=2, duration=60, live=False)")
        kernel = subprocess.Popen([sys.executable, "-c", code], env=os.environ.copy())
        waiting = "select count(*) from pg_stat_activity where application_name like 'labkit-run-%' and wait_event_type = 'Lock'"
        deadline = time.monotonic() + 30
        while lab.value(waiting) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert lab.value(waiting) == 2, "the run's clients did not queue behind the holder"
        kernel.kill()  # what nbval does to a kernel; pgbench goes with it (or is killed by the reaper)
        kernel.wait()
        lab.server.reap_orphans()  # what the watchdog does every 2 s (it may have done it already)
        deadline = time.monotonic() + 10
        while leftover_backends(lab) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert leftover_backends(lab) == 0
        assert holder.run("select 1").message() == "SELECT 1"  # the holder still holds its lock: they were ended
    finally:
        if kernel is not None and kernel.poll() is None:
            kernel.kill()
            kernel.wait()
        holder.run("rollback")
        lab.set(client_connection_check_interval=check)


def test_a_session_may_not_take_a_name_of_labkits_own(lab):
    with pytest.raises(UsageError, match="a name labkit uses for its own connections"):
        lab.session("probe")
    assert lab.session("probe2").run("select 1").message() == "SELECT 1"


def test_check_notes_one_row_in_the_run(lab, hot_row):
    from labkit import records

    run = lab.pgbench("update hot set n = n + 1 where id = 1;", name="checked", clients=2, duration=1, probes=[])
    frame = lab.check("select n as total, 'ok' as verdict from hot where id = 1")
    assert frame.loc[0, "run"] == "checked" and frame.loc[0, "verdict"] == "ok"
    saved = records.Run.load(run.path)
    assert saved.extra["total"] == frame.loc[0, "total"] >= run.transactions
    with pytest.raises(UsageError, match="exactly one row; this one returned 0"):
        lab.check("select 1 where false")
    frame = lab.check("select 1.5::numeric as ratio, 2::bigint as pages")  # through pandas.read_sql and the engine
    assert type(run.extra["ratio"]) is float and type(run.extra["pages"]) is int  # plain values in the record
    with pytest.raises(UsageError, match='^The check failed: column "nope" does not exist$'):
        lab.check("select nope from hot")


def test_the_engine_connects_through_labkit(lab):
    import pandas as pd

    frame = pd.read_sql("select application_name from pg_stat_activity where pid = pg_backend_pid()", lab.engine())
    assert frame.iloc[0, 0] == "labkit-admin"


def test_copy_loads_generated_rows(lab):
    lab.sql("drop table if exists copied; create table copied (id int, s text)")
    count = lab.copy("copied", ((i, f"row {i}\twith a tab") for i in range(1, 1001)))
    assert count == 1000
    assert lab.value("select count(distinct id) from copied") == 1000
    assert lab.value("select s from copied where id = 7") == "row 7\twith a tab"
    assert lab.copy("copied", [("only s",)], columns=["s"]) == 1
    assert lab.value("select count(*) from copied where id is null") == 1
    with pytest.raises(psycopg.errors.InvalidTextRepresentation,
                       match='^invalid input syntax for type integer: "not a number"\nCONTEXT:  COPY copied, '
                             'line 1, column id: "not a number"$') as refused:
        lab.copy("copied", [("not a number", "x")])
    assert refused.value.sqlstate == "22P02"  # the server's own error, as the error contract says
    assert lab.value("select count(*) from copied") == 1001  # the COPY was refused whole


def test_sweep_calls_before_and_after_each_run(lab, hot_row):
    calls = []
    runs = lab.sweep({"a": "update hot set n = n + 1 where id = 1;", "b": "select 1;"}, [1, 2], duration=1,
                     before=lambda lab, name, count: calls.append(("before", name, count)),
                     after=lambda lab, run: (calls.append(("after", run.name, run.clients)), run.note(seen=True)))
    assert [run.name for run in runs] == ["sweep-a", "sweep-b", "sweep-a", "sweep-b"]
    # interleaved: the first script alternates from one point to the next
    assert calls == [("before", "a", 1), ("after", "sweep-a", 1), ("before", "b", 1), ("after", "sweep-b", 1),
                     ("before", "b", 2), ("after", "sweep-b", 2), ("before", "a", 2), ("after", "sweep-a", 2)]
    assert all(run.extra["seen"] is True and run.extra["method"] in ("a", "b") for run in runs)


def test_a_lock_held_by_an_ordinary_session_is_still_reported(lab, hot_row):
    sessions = lab.sessions
    holder = lab.session("holder")
    holder.run("begin; lock table hot in access exclusive mode")
    try:
        assert sessions._only_autovacuum([holder.pid]) is False
        with pytest.raises(LabkitError, match="waiting for a lock held by holder"):
            lab.sql("select * from hot")
    finally:
        holder.run("rollback")
        main = lab.session("main")
        if main.pending is not None:
            main.pending.result(timeout=5)
            main.pending = None


def test_perf_falls_back_to_one_line_when_perf_is_absent(lab, monkeypatch):
    from labkit import perf

    monkeypatch.setattr(perf, "availability", lambda: perf.Availability(False, "perf is not installed (test)"))
    run = lab.pgbench("select 1;", name="no-perf", clients=1, duration=1, perf=True, live=False)
    assert run.transactions > 0 and run.probes.get("waits") is not None
    assert run.extra["perf"] == {"available": False, "message": "perf is not installed (test)"}
    assert perf.table(run).iloc[0]["perf"] == "perf is not installed (test)"


def test_perf_records_the_server_backends(lab, monkeypatch):
    from labkit import perf

    if not perf.availability().available:
        pytest.skip(perf.availability().message)
    lab.sql("drop sequence if exists perf_seq; create sequence perf_seq")
    folders = []  # this run's own perf folder: other workers of the suite record perf at the same time
    made = tempfile.mkdtemp

    def mkdtemp(*args, **kwargs):
        folder = made(*args, **kwargs)
        if kwargs.get("prefix") == "labkit-perf-":
            folders.append(folder)
        return folder

    monkeypatch.setattr(tempfile, "mkdtemp", mkdtemp)
    run = lab.pgbench("select count(nextval('perf_seq')) from generate_series(1, 2000);", name="perf",
                      clients=2, duration=4, perf=True, live=False)
    figures = run.extra["perf"]
    assert figures["available"] is True and figures["samples"] > 50
    assert {"nextval_internal", "ExecInterpExpr"} & {row["symbol"] for row in figures["symbols"]}
    assert folders and not any(Path(f).exists() for f in folders), "perf data left behind"
    assert not [p for p in psutil.process_iter(["name"]) if p.info["name"] == "perf"], "perf left running"


@pytest.mark.parametrize("name", ["buyer-who-keeps-the-last-item-in-the-basket-while-the-sale-goes-on-" + "x" * 10,
                                  "acheteur-é"])
def test_a_session_whose_name_the_server_shortens_or_escapes_still_holds_the_run_back(lab, hot_row, name):
    """pg_stat_activity keeps 63 bytes of an application_name, its bytes outside printable ASCII as \\xNN."""
    holder = lab.session(name)
    holder.run("begin; update hot set n = n + 1 where id = 1")
    # A run that did start would wait behind the held row for as long as it is held: it is let go after 5 s.
    release = threading.Timer(5.0, lambda: lab.value("select pg_terminate_backend(%s)", (holder.pid,)))
    release.start()
    try:
        with pytest.raises(UsageError, match=rf"Not started: {name} has been idle in a transaction"):
            lab.pgbench("update hot set n = n + 1 where id = 1;", name="behind-long", clients=1, duration=1, live=False)
    finally:
        release.cancel()
        lab.sessions.sessions.pop(name).close()


def test_a_run_does_not_start_behind_this_notebooks_open_transaction(lab, hot_row):
    """A session left idle in a transaction is named, with what it holds, and nothing runs behind it."""
    holder = lab.session("T1")
    holder.run("begin; update hot set n = n + 1 where id = 1")
    try:
        with pytest.raises(UsageError, match=r"Not started: T1 has been idle in a transaction for \d+ s, "
                                             r"holding hot \(RowExclusiveLock\): end it with a %%sql --session T1"):
            lab.pgbench("update hot set n = n + 1 where id = 1;", name="behind-T1", clients=2, duration=1, live=False)
        assert leftover_backends(lab) == 0 and not pgbench_children()
        # On purpose: a run that does not touch the held row goes ahead.
        run = lab.pgbench("select 1;", name="beside-T1", clients=2, duration=1, live=False, hold_sessions=True)
        assert run.transactions > 0
        # An error inside a savepoint aborts only the savepoint: the update's lock is still held.
        holder.run("savepoint s; select 1/0")
        with pytest.raises(UsageError, match=r"T1 has been idle in a transaction \(after an error inside a savepoint\)"
                                             r" for \d+ s, holding hot \(RowExclusiveLock\)"):
            lab.pgbench("update hot set n = n + 1 where id = 1;", name="behind-T1", clients=2, duration=1, live=False)
        # Back out of the savepoint, then a failure outside one: the whole transaction is aborted and
        # has released its locks already: nothing to wait behind.
        holder.run("rollback to savepoint s; release savepoint s")  # (rollback to keeps the savepoint)
        holder.run("select 1/0")
        run = lab.pgbench("update hot set n = n + 1 where id = 1;", name="beside-failed-T1", clients=2, duration=1,
                          live=False)
        assert run.transactions > 0
    finally:
        holder.run("rollback")
    run = lab.pgbench("update hot set n = n + 1 where id = 1;", name="after-T1", clients=2, duration=1, live=False)
    assert run.transactions > 0


def test_a_sweep_with_no_number_of_clients_is_one_line(lab):
    with pytest.raises(UsageError, match=r"^lab.sweep needs at least one number of clients"):
        lab.sweep({"one": "select 1;"}, clients=[])
