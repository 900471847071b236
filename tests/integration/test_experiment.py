"""Experiments against the real server: arms interleaved, their setup around each run, events counted, cells as arms."""

import threading

import pytest

import labkit
from labkit import db, records

pytestmark = pytest.mark.integration


def test_arms_run_interleaved_with_their_setup_and_the_events_of_each_run(lab, hot_row):
    setups = []

    def checkpoint_soon(lab, arm):
        setups.append(arm)
        if len(setups) == 2:  # during the second run: a checkpoint that run's record must name
            def checkpoint():
                with db.connect(lab.server.admin_conninfo()) as connection:
                    connection.execute("checkpoint")
            threading.Timer(1.0, checkpoint).start()

    result = lab.experiment({"exp-write": "update hot set n = n + 1 where id = 1;", "exp-read": "select n from hot;"},
                            repeats=2, clients=2, duration=3, setup=checkpoint_soon)
    assert result.ran == setups == ["exp-write", "exp-read", "exp-read", "exp-write"]
    saved = [records.Run.load(run.path) for run in result.runs()]
    assert {run.experiment for run in saved} == {result.groups["exp-write"][0].experiment}
    assert sorted(run.order for run in saved) == [1, 2, 3, 4]
    second = next(run for run in saved if run.order == 2)
    assert second.extra["events"]["checkpoints"] >= 1, second.extra["events"]
    assert all(set(run.extra["events"]) == {"autovacuum", "autoanalyze", "checkpoints", "checkpoint_buffers"}
               for run in saved)
    found = result.verdict()
    # compared pair by pair (or said to be too few pairs once those with a change of the machine's load are out)
    assert found.basis in ("pairs", "load changed") and found.a == "exp-write" and found.b == "exp-read"
    assert lab.verdict("exp-write", "exp-read").basis == found.basis  # the saved runs keep their pairing
    assert list(result.table().index) == ["exp-write", "exp-read"]


def test_pgbench_cells_defined_as_arms_run_interleaved(lab, hot_row):
    from IPython.core.error import UsageError as IPythonUsageError
    from IPython.testing import globalipapp

    shell = globalipapp.get_ipython()
    labkit.load_ipython_extension(shell)
    magics = shell.magics_manager.registry["LabMagics"]
    lab = labkit.start("tests")  # the lab the magics use: the one started last
    assert magics.pgbench("--name cell-a -c 2 -T 3 --arm", "select 1;") is None
    assert magics.pgbench("--name cell-b -c 2 -T 3 --arm", "select n from hot;") is None
    with pytest.raises(IPythonUsageError, match="--arm needs the arm's name"):
        magics.pgbench("-c 2 -T 3 --arm", "select 1;")
    assert not records.list_runs(notebook=lab.notebook, name="cell-a")  # defined, not run
    result = lab.experiment(["cell-a", "cell-b"], repeats=1)
    assert result.ran == ["cell-a", "cell-b"]
    assert all(run.clients == 2 and run.duration_s == 3 for run in result.runs())


def test_a_per_call_cost_in_one_session_reads_the_backends_own_cpu(lab):
    lab.sql("drop sequence if exists pc_seq; create sequence pc_seq")
    found = lab.per_call({"nextval": "select count(nextval('pc_seq')) from generate_series(1, 20000)",
                          "count": "select count(g) from generate_series(1, 20000) g"},
                         calls=20000, rounds=2, min_s=0.3)
    assert found.ran == ["nextval", "count", "count", "nextval"] and found.kind == "cost"
    saved = [records.Run.load(run.path) for run in found.runs()]
    assert all(run.extra["per_call_basis"] == "the backend's CPU time" and run.extra["ns_per_call"] > 0
               for run in saved)
    assert len({run.experiment for run in saved}) == 1
    assert found.verdict().basis == "per repeat"
