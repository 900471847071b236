"""The probes against the real server: their own schedules, the wait classes, held_by's cost, the CPU split."""

import statistics
import threading
import time

import psutil
import pytest

import labkit
from labkit import db

pytestmark = pytest.mark.integration


def test_wait_samples_keep_their_interval_while_a_slow_probe_runs(lab, hot_row):
    slow = labkit.probe("slow", "select pg_sleep(0.8) as slept", every=0.1)  # 8x longer than its interval
    run = lab.pgbench("select 1;", name="slow-probe", clients=2, duration=3, probes=[labkit.WAIT_EVENTS, slow])
    instants = sorted({row["t"] for row in run.probes["waits"]})
    gaps = [b - a for a, b in zip(instants, instants[1:])]
    assert len(instants) >= 10 and statistics.median(gaps) == pytest.approx(0.25, abs=0.05), gaps
    assert max(gaps) < 0.6, gaps  # no gap of a slow sample
    costs = {cost["name"]: cost for cost in run.extra["probe_costs"]}
    # its own time, spent on its own thread: a sample every 0.8 s or so through the 3 s run, each taking its 0.8 s
    assert costs["slow"]["samples"] >= 3 and costs["slow"]["busy_s"] >= 0.8 * costs["slow"]["samples"] - 0.01, costs
    assert costs["waits"]["reads_lock_table"] is False and costs["held_by"]["every_s"] == 1.0


def test_the_wait_classes_add_up_to_the_clients_idle_in_transaction_included(lab):
    script = "begin;\nselect 1;\n\\sleep 100 ms\ncommit;\n"  # most of each transaction: between two statements
    run = lab.pgbench(script, name="idle-in-tx", clients=4, duration=2, probes=[labkit.WAIT_EVENTS])
    per_instant = {}
    for row in run.probes["waits"]:
        per_instant.setdefault(row["t"], {})[row["wait"]] = row["backends"]
    sums = {t: sum(classes.values()) for t, classes in per_instant.items() if "idle" not in classes}
    assert max(sums.values()) == 4, per_instant  # the probes and other sessions are not the run's clients
    first_full = min(t for t, total in sums.items() if total == 4)
    steady = [t for t in sums if first_full <= t <= 1.7]  # all connected, none gone yet (-T 2)
    assert len(steady) >= 4 and all(sums[t] == 4 for t in steady), per_instant
    connected = [per_instant[t] for t in steady]
    share = sum(classes.get("idle in transaction", 0) for classes in connected) / (4 * len(connected))
    assert share > 0.5, per_instant  # the sleep is inside the transaction


def test_held_by_names_who_holds_the_lock_the_whole_run_waits_for(lab, hot_row):
    """Two clients of a run queue for a row a session outside the run holds; a session outside the run
    queues after them. held_by counts the run's two waiting clients and names the holder: not the run's
    first client (it holds the tuple lock the second waits for), nor the session queued behind them. It
    reads the lock table while the run waits, and only then."""
    def lock_table_read(sql: str) -> bool:
        with db.connect(lab.conninfo) as connection:
            plan = [line for (line,) in connection.execute("explain (analyze, timing off, costs off) " + sql)]
        return any("pg_lock_status" in line and "never executed" not in line for line in plan)

    def held_by(sql: str) -> list[tuple]:
        with db.connect(lab.conninfo) as connection:
            return connection.execute(sql).fetchall()

    run = "labkit-run-0000abcd"  # the application_name of a run's clients (two connections stand in for them)
    sql = labkit.probes.HELD_BY_PROBE.for_run(run).sql
    update = "update hot set n = n + 1 where id = 1"
    holder = db.connect(lab.conninfo, db.session_name("holder"))
    queued = [db.connect(lab.conninfo, run), db.connect(lab.conninfo, run), db.connect(lab.conninfo, db.session_name("after"))]
    threads = []
    try:
        holder.execute("begin")
        holder.execute(update)
        assert held_by(sql) == [] and not lock_table_read(sql)  # the run's clients do not wait yet
        for count, connection in enumerate(queued, 1):  # one after the other: the outsider queues last
            threads.append(threading.Thread(target=connection.execute, args=(update,)))
            threads[-1].start()
            pids = [c.info.backend_pid for c in queued[:count]]
            waiting = "select count(*) from pg_stat_activity where pid = any(%s) and wait_event_type = 'Lock'"
            deadline = time.monotonic() + 10
            while lab.value(waiting, (pids,)) < count and time.monotonic() < deadline:
                time.sleep(0.05)
            assert lab.value(waiting, (pids,)) == count
        assert held_by(sql) == [(2, "holder (idle in transaction)")]
        assert lock_table_read(sql)
    finally:
        holder.execute("rollback")
        for thread in threads:
            thread.join(timeout=10)
        for connection in [holder, *queued]:
            connection.close()
    assert held_by(sql) == [] and not lock_table_read(sql)  # the wait is over
    assert lab.value("select n from hot where id = 1") == 3  # each queued update went through


def _children_cpu_s() -> float | None:
    """CPU seconds of this process's children that have ended (POSIX: getrusage; None elsewhere)."""
    try:
        import resource
    except ImportError:
        return None
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def test_the_cpu_split_is_recorded_and_drawn(lab):
    children = _children_cpu_s()  # pgbench is this process's child: the OS's own count of its CPU, once it has ended
    run = lab.pgbench("select :client_id::int + 1;", name="cpu-split", clients=2, jobs=1, duration=3,
                      probes=[labkit.WAIT_EVENTS])
    pgbench_cpu_s = None if children is None else _children_cpu_s() - children
    rows = run.probes["cpu"]
    split = run.extra["cpu"]
    assert len(rows) >= 2 and split["pgbench"] > 0, rows
    # The server's work here is the run's two backends'; the rest of the server (the probes' backends,
    # the WAL writer) does little. A backend counted on the wrong side of the split shows here.
    assert split["backends"] > 3 * split["server_other"], rows
    assert all(row["pgbench"] + row["backends"] + row["server_other"] <= 1.15 * split["cpus"] + 0.1 for row in rows), rows
    # sampled as often as the wait events: a 3 s run has a CPU figure (how many samples a machine busy with
    # other work lets the probe take is the machine's; CI once gave it 2 of 3 s: the figure says how many)
    assert split["threads"] == 1 and split["cpus"] > 0 and split["every_s"] == labkit.WAIT_EVENTS.every_s
    assert 0 < split["samples"] <= len(rows)
    assert 0 < split["pgbench"] <= 1.1, rows  # one thread uses one core at most (0.1: an interval read a little late)
    if pgbench_cpu_s is not None:
        # the samples, added up, are what the OS counted for pgbench: all of it at most, most of it at least (the
        # samples leave out its connecting and its last quarter second)
        sampled_s = sum(row["pgbench"] * 0.25 for row in rows if row["pgbench"] is not None)
        assert 0.5 * pgbench_cpu_s - 0.05 <= sampled_s <= 1.15 * pgbench_cpu_s + 0.05, (sampled_s, pgbench_cpu_s)
    figure = labkit.charts.timeline(run)
    assert any(trace.name == "cpu: pgbench" for trace in figure.data)
    assert any(trace.name == "cpu: backends" for trace in figure.data)
    warned = [a.text for a in figure.layout.annotations if a.name == "cpu warning"]
    assert bool(warned) == (split["warning"] is not None)



def test_the_cpu_of_labkits_own_process_is_the_instruments_not_other_processes(lab):
    # a thread of this process (the kernel's, in a notebook) spins through the run: its CPU is labkit's own
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            sum(range(1000))

    spinner = threading.Thread(target=spin, daemon=True)
    me = psutil.Process()
    before = sum(me.cpu_times()[:2])
    spinner.start()
    try:
        run = lab.pgbench("select pg_sleep(0.01);", name="cpu-instrument", clients=1, duration=3, probes=[])
    finally:
        stop.set()
        spinner.join()
    counted_s = sum(me.cpu_times()[:2]) - before  # the OS's count: the run's, and its start and end around it
    rows = run.probes["cpu"]
    sampled_s = sum(row["labkit"] * 0.25 for row in rows if row["labkit"] is not None)
    # the samples cover the run only, not its start and end (which may cost this process more than the run):
    # some of the spinner's CPU at least, never more than the OS counted
    assert 0.1 <= sampled_s <= 1.15 * counted_s + 0.05, (sampled_s, counted_s, rows)
    split = run.extra["cpu"]
    ours = split["pgbench"] + split["backends"] + split["server_other"] + split["labkit"]
    assert labkit.cpu.others(split) == pytest.approx(max(0.0, split["cpus"] - split["idle"] - ours), abs=0.002), split


def test_a_run_whose_clients_aborted_says_so(lab):
    script = "\\if :client_id = 0\nselect 1 where false \\gset\n\\endif\nselect 1;\n"  # client 0: no row to \gset
    with pytest.warns(UserWarning, match=r"aborted: 1 of 2 clients aborted \(.*\); the tps counts the transactions "
                                         r"of the 1 that went on"):
        run = lab.pgbench(script, name="aborted", clients=2, duration=1, probes=[])
    assert run.aborted_clients == 1 and run.transactions > 0


def test_backends_that_outlive_the_wait_are_said(lab):
    from labkit import runner

    lingering = lab.session("lingering")  # application_name labkit-lingering, standing in for a run's backend
    with pytest.warns(UserWarning, match=r"1 backend\(s\) of the run were still there after 0 s"):
        assert runner.wait_backends_gone(lab.conninfo, "labkit-lingering", timeout_s=0.3) is False
    lingering.run("select 1")


def test_records_do_not_mix_profiles(lab):
    from labkit import records

    run = lab.pgbench("select 1;", name="profiled", clients=1, duration=1, probes=[])
    other = records.Run.load(run.path)
    other.profile, other.started_at, other.path, other.tps = "laptop", "2999-01-01T00:00:00+00:00", None, 1.0
    other.save()  # newer, but of another profile
    assert lab.records(["profiled"])[0].tps == run.tps
    assert lab.records(["profiled"], any_profile=True)[0].profile == "laptop"


def test_a_run_and_a_failing_probe_are_logged(lab, caplog):
    broken = labkit.probe("broken", "select * from no_such_table")
    with caplog.at_level("INFO", logger="labkit"):
        run = lab.pgbench("select 1;", name="logged", clients=1, duration=1, probes=[broken])
    said = [(record.name, record.getMessage()) for record in caplog.records]
    assert ("labkit.probes", 'probe broken stopped: relation "no_such_table" does not exist') in said
    assert any(name == "labkit.runner" and message.startswith("run logged (labkit-run-") for name, message in said)
    assert run.extra["probe_errors"] == {"broken": 'relation "no_such_table" does not exist'}


def test_held_by_names_a_waiter_the_run_queues_behind(lab, hot_row):
    """Clients asking for RowExclusiveLock queue behind an ALTER TABLE that waits itself (for a reader)."""
    import threading

    reader, alter = lab.session("reader"), lab.session("alter")
    reader.run("begin; select count(*) from hot")  # AccessShareLock, kept
    assert "waiting for a lock held by reader" in alter.run("alter table hot add column note text").message()
    release = threading.Timer(2.5, lambda: lab.value("select pg_terminate_backend(%s)", (reader.pid,)))
    release.start()
    try:
        run = lab.pgbench("update hot set n = n + 1 where id = 1;", name="queued", clients=2, duration=4,
                          hold_sessions=True, probes=[])
    finally:
        release.cancel()
        lab.sessions.sessions.pop("reader").close()
        alter.pending.result(timeout=10)
        alter.pending = None
        lab.sql("alter table hot drop column if exists note")
    assert {row["holders"] for row in run.probes["held_by"]} == {"alter (active)"}, run.probes["held_by"]


def test_an_error_in_an_observer_stops_pgbench_and_its_backends(lab):
    from labkit import pgbench, runner

    class Broken:
        def progress(self, point, line):
            raise RuntimeError("the chart broke")

        def samples(self, fresh):
            pass

    spec = pgbench.parse_options(["-c", "2", "-T", "30", "--name", "broken-observer"], script="select pg_sleep(0.01);")
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="the chart broke"):
        lab.run_spec(spec, observer=Broken())
    assert time.monotonic() - started < 15  # not the 30 s pgbench was given
    assert not runner._ONE_RUN.locked()
    assert lab.value("select count(*) from pg_stat_activity where application_name like 'labkit-run-%'") == 0


def test_a_counter_probe_records_each_intervals_rate(lab, hot_row):
    rates = labkit.probe("rates", """select n_tup_upd as updates, n_tup_hot_upd as hot_updates
                                     from pg_stat_user_tables where relname = 'hot'""", counters=["updates", "hot_updates"])
    run = lab.pgbench("update hot set n = n + 1 where id = 1;", name="counter-rates", clients=2, duration=4,
                      probes=[rates])
    rows = run.probes["rates"]
    assert set(rows[0]) == {"t", "updates_per_s", "hot_updates_per_s"} and rows[0]["updates_per_s"] is None
    measured = [row for row in rows[1:] if row["updates_per_s"] is not None]
    assert len(measured) >= 3, rows
    # the rates integrate back to the counter's increase, which pgbench's own count bounds
    counted = sum(row["updates_per_s"] * (b["t"] - a["t"]) for a, b, row in zip(rows, rows[1:], rows[1:]))
    assert 0 < counted <= run.transactions + 1e-6, (counted, run.transactions)  # 1e-6: float rounding
    assert all(row["hot_updates_per_s"] <= row["updates_per_s"] + 1e-9 for row in measured), rows
    # one row, a column no index covers: its updates are HOT, and the probe sees them as such
    assert any(row["hot_updates_per_s"] > 0 for row in measured), rows


def test_a_counter_probe_must_return_one_row(lab):
    many = labkit.probe("many", "select g as n from generate_series(1, 2) g", counters=["n"])
    run = lab.pgbench("select 1;", name="counter-rows", clients=1, duration=1, probes=[many])
    assert run.extra["probe_errors"] == {"many": "a probe with counters returns one row, not 2"}


def test_backends_that_exit_are_counted_once(lab):
    # -C: a new connection, so a new backend, per transaction; each one runs long enough to be
    # sampled alive, then exits and is reaped: its CPU must not come back a second time
    run = lab.pgbench("select count(*) from generate_series(1, 3000000);", name="cpu-exits", clients=2, jobs=1,
                      duration=5, options="-C", probes=[])
    cores = run.extra["cpu"]["cpus"]
    rows = [row for row in run.probes["cpu"] if row["backends"] is not None]
    assert len(rows) >= 3 and sum(row["backends"] for row in rows) > 0, rows
    # each 250 ms sample credits a backend first seen, or reaped, with what it used since it was last seen, a
    # little of it before the sample's own interval: one sample may exceed the machine, the run's mean may not
    used = [row["pgbench"] + row["backends"] + row["server_other"] for row in rows]
    assert sum(used) / len(used) <= 1.15 * cores + 0.1, rows
