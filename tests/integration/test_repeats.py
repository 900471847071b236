"""Repeats against the real server: kept together, compared with their spread; an interrupted run is the last run."""

import threading
import time

import pytest

import labkit
from labkit import records
from tests.integration.test_runs import assert_interrupts_reach_this_thread

pytestmark = pytest.mark.integration


def test_repeats_are_run_recorded_together_and_compared(lab):
    lab.sql("drop table if exists rep; create table rep (id int primary key, n int); insert into rep values (1, 0)")
    seen = []
    plain = lab.pgbench("update rep set n = n + 1 where id = 1;", name="rep-one-row", clients=4, duration=3,
                        repeats=2, live=False, setup="update rep set n = 0", after=lambda run: seen.append(run.repeat))
    assert isinstance(plain, records.Repeats) and len(plain) == 2 and seen == [1, 2]
    assert [run.repeat for run in plain] == [1, 2] and {run.repeats for run in plain} == {2}
    assert len({run.series for run in plain}) == 1 and len({run.path for run in plain}) == 2
    assert records.Run.load(plain[0].path).series == plain[0].series  # the tags are in the saved record
    reads = lab.pgbench("select n from rep where id = 1;", name="rep-read", clients=4, duration=3, repeats=2,
                        live=False)
    groups = lab.groups(["rep-one-row", "rep-read"])
    assert [run.path for run in groups["rep-one-row"]] == [run.path for run in plain]
    assert [run.path for run in groups["rep-read"]] == [run.path for run in reads]
    found = lab.verdict("rep-one-row", "rep-read")
    assert found.basis == "repeats" and found.a_values == [run.tps for run in plain]
    assert found.sentence.startswith("rep-read / rep-one-row, tps: ")
    figure = lab.compare(["rep-one-row", "rep-read"])
    bars = [trace for trace in figure.data if trace.type == "bar"]
    assert bars[0].error_x.visible and list(bars[0].y) == ["rep-one-row (c=4) ×2", "rep-read (c=4) ×2"]


def test_the_magic_repeats_and_refuses_a_bad_count(lab):
    from IPython.core.error import UsageError as IPythonUsageError
    from IPython.testing import globalipapp

    shell = globalipapp.get_ipython()  # the one global shell: started by the first test that asks
    labkit.load_ipython_extension(shell)
    magics = shell.magics_manager.registry["LabMagics"]
    group = magics.pgbench("--name rep-magic -c 2 -T 1 --repeat 2", "select 1;")
    assert [run.repeat for run in group] == [1, 2]
    with pytest.raises(IPythonUsageError, match="--repeat two: give a whole number of runs"):
        magics.pgbench("--name rep-magic -c 2 -T 1 --repeat two", "select 1;")
    # a function as the setup (what one SQL string cannot hold: VACUUM after a rebuild) and one after each run
    calls = []
    shell.user_ns["rebuild"] = lambda lab: (calls.append("setup"), lab.sql("vacuum"))
    shell.user_ns["noted"] = lambda run: calls.append(f"after {run.repeat}")
    magics.pgbench("--name rep-hooks -c 2 -T 1 --repeat 2 --setup rebuild --after noted", "select 1;")
    assert calls == ["setup", "after 1", "setup", "after 2"]
    shell.user_ns["noted"] = "not a function"
    with pytest.raises(IPythonUsageError, match="--after noted: define it first as a function of the run"):
        magics.pgbench("--name rep-hooks -c 2 -T 1 --after noted", "select 1;")


def test_a_check_after_an_interrupted_run_notes_into_that_run(lab):
    first = lab.pgbench("select 1;", name="before-interrupt", clients=2, duration=1, live=False)
    assert lab.last_run is first
    assert_interrupts_reach_this_thread()
    timer = threading.Timer(1.5, lambda: __import__("_thread").interrupt_main())
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        lab.pgbench("select pg_sleep(0.01);", name="interrupted", clients=2, duration=10, live=False)
    timer.cancel()
    time.sleep(0.2)
    assert lab.last_run is not None and lab.last_run.name == "interrupted" and lab.last_run.interrupted
    lab.check("select 42 as answer")
    assert records.Run.load(lab.last_run.path).extra.get("answer") == 42
    assert "answer" not in records.Run.load(first.path).extra
