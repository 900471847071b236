"""Interleavings against the real server: PostgreSQL's own isolation specs give their expected output."""

import subprocess
import sys
import time
from pathlib import Path

import pytest

from labkit import charts, interleave
from labkit.errors import UsageError

pytestmark = pytest.mark.integration

SPECS = Path(__file__).resolve().parents[1] / "data" / "isolation"


@pytest.mark.parametrize("name", sorted(path.stem for path in SPECS.glob("*.spec")))
def test_postgresql_isolation_spec_gives_its_expected_output(lab, name):
    spec = (SPECS / f"{name}.spec").read_text(encoding="utf-8")
    expected = (SPECS / f"{name}.out").read_text(encoding="utf-8")
    outcome = interleave.run(lab, spec)
    assert outcome.text.splitlines() == expected.splitlines()


OWN = """
setup { create table if not exists own (id int primary key, n int); truncate own; insert into own values (1, 0); }
teardown { drop table own; }
session s1
setup { begin; }
step s1u { update own set n = n + 1 where id = 1; }
step s1n { do $$ begin raise notice 'one from s1'; end $$; }
step s1bad { select 1 / 0; }
step s1c { commit; }
session s2
step s2u { update own set n = n + 10 where id = 1 returning n; }
step s2q { select n from own; }
"""


def test_a_step_that_waits_is_completed_by_the_one_that_releases_it_with_its_lock_and_holder(lab):
    outcome = interleave.run(lab, OWN, permutation="s1u s2u s1n s1c s2q")
    assert outcome.text.splitlines()[1:] == [
        "", "starting permutation: s1u s2u s1n s1c s2q",
        "step s1u: update own set n = n + 1 where id = 1;",
        "step s2u: update own set n = n + 10 where id = 1 returning n; <waiting ...>",
        "s1: NOTICE:  one from s1",
        "step s1n: do $$ begin raise notice 'one from s1'; end $$;",
        "step s1c: commit;",
        "step s2u: <... completed>",
        " n", "--", "11", "(1 row)", "",
        "step s2q: select n from own;",
        " n", "--", "11", "(1 row)", "",
    ]
    (run,) = outcome.permutations
    waited = next(event for event in run.events if event.step == "s2u")
    assert waited.released_by == "s1c" and waited.waiting_s is not None
    assert waited.lock["locktype"] == "transactionid" and waited.lock["mode"] == "ShareLock"
    assert waited.lock["held_by"] == ["s1"]
    assert waited.rows == [{"n": "11"}]
    figure = charts.lanes(run)
    assert [bar.y[0] for bar in figure.data] == ["s1", "s2", "s1", "s1", "s2"]
    assert any("waits for ShareLock on transactionid" in (a.text or "") and "held by s1" in a.text
               for a in figure.layout.annotations)
    # the session is the lab's: a cell can read it afterwards
    assert lab.session("s2").run("select 2 as two").frame.iloc[0]["two"] == 2


def test_an_error_inside_a_step_is_printed_as_the_tester_prints_it_and_the_next_steps_go_on(lab):
    outcome = interleave.run(lab, OWN, permutation="s1bad s1c s2q")
    assert "step s1bad: select 1 / 0;\nERROR:  division by zero\nstep s1c: commit;\n" in outcome.text
    assert next(e for e in outcome.permutations[0].events if e.step == "s1bad").error == "ERROR:  division by zero"


def test_a_star_marker_reports_waiting_at_once_and_a_step_marker_holds_a_completion(lab):
    outcome = interleave.run(lab, OWN, permutation="s1u s2q(*) s2u s1c(s2u)")
    lines = outcome.text.splitlines()
    assert "step s2q: select n from own; <waiting ...>" in lines  # (*): said waiting, though it never waits
    # s1c's completion is held until s2u, which it releases, has completed
    assert lines.index("step s2u: <... completed>") < lines.index("step s1c: <... completed>")


def test_every_permutation_runs_when_none_is_given(lab):
    spec = interleave.parse("""
session a
step a1 { select 1; }
step a2 { select 2; }
session b
step b1 { select 3; }
""")
    outcome = interleave.run(lab, spec)
    assert [run.name for run in outcome.permutations] == ["a1 a2 b1", "a1 b1 a2", "b1 a1 a2"]


def test_a_blocked_step_never_freezes_the_caller_it_is_cancelled_as_the_tester_does(lab):
    """s2q must wait for s2u, which waits for s1, whose commit comes only later: an invalid permutation."""
    started = time.monotonic()
    outcome = interleave.run(lab, OWN, permutation="s1u s2u s2q s1c", step_timeout_s=1)
    assert time.monotonic() - started < 8
    assert "isolationtester: canceling step s2u after 1 seconds\n" in outcome.text
    assert "step s2u: <... completed>\nERROR:  canceling statement due to user request\n" in outcome.text
    assert not lab.session("s2").busy and not lab.session("s1").busy  # nothing left running


def test_bad_specs_say_what_is_wrong():
    with pytest.raises(UsageError, match='Undefined step "s9" specified in permutation'):
        interleave.parse("session s1\nstep s1a { select 1; }\npermutation s1a s9")
    with pytest.raises(UsageError, match="cannot block on its own session"):
        interleave.parse("session s1\nstep s1a { select 1; }\nstep s1b { select 2; }\npermutation s1a s1b(s1a)")
    with pytest.raises(UsageError, match="Duplicate step name: a"):
        interleave.parse("session s1\nstep a { select 1; }\nsession s2\nstep a { select 2; }")
    with pytest.raises(UsageError, match="Line 2: unterminated SQL block"):
        interleave.parse("session s1\nstep a { select 1;")


@pytest.mark.posix
def test_a_script_that_ends_while_a_step_waits_exits_at_once(lab, tmp_path):
    script = tmp_path / "waits.py"
    script.write_text(
        "import labkit, threading\n"
        f"lab = labkit.start({lab.notebook!r})\n"
        "from labkit import interleave\n"
        "holder = lab.session('holder'); holder.run('begin'); holder.run('lock table own_exit in exclusive mode')\n"
        "spec = 'session w\\nstep w1 { select * from own_exit; }'\n"
        "threading.Thread(target=interleave.run, args=(lab, spec), daemon=True).start()\n"
        "import time; time.sleep(1.5)\n", encoding="utf-8")
    lab.sql("create table if not exists own_exit (id int)")
    started = time.monotonic()
    subprocess.run([sys.executable, str(script)], check=True, timeout=60)
    assert time.monotonic() - started < 15


def test_the_steps_magic_prints_as_it_goes_and_keeps_the_outcome(lab, capsys):
    from IPython.core.error import UsageError as IPythonUsageError
    from IPython.testing import globalipapp

    import labkit

    shell = globalipapp.get_ipython()  # the one global shell: started by the first test that asks
    labkit.load_ipython_extension(shell)
    magics = shell.magics_manager.registry["LabMagics"]
    magics.steps('--permutation "s1u s2u s1c" --out seen', OWN)
    printed = capsys.readouterr().out
    # the permutation is the cell's, not the spec's: the tester's check for unused steps does not apply
    assert printed.startswith("Parsed test spec with 2 sessions\n\nstarting permutation: s1u s2u s1c\n")
    assert "step s2u: update own set n = n + 10 where id = 1 returning n; <waiting ...>\n" in printed
    assert shell.user_ns["seen"].text == printed
    with pytest.raises(IPythonUsageError, match='Undefined step "nope"'):
        magics.steps('--permutation "s1u nope"', OWN)
    assert lab.steps(OWN, permutation="s2q").permutations[0].events[0].rows == [{"n": "0"}]


def test_a_permutation_the_tester_gives_up_ends_its_text_leaves_no_transaction_open_and_runs_the_teardowns(lab):
    outcome = interleave.run(lab, OWN, permutation="s1u s2q(s1u notices 1)", step_timeout_s=1)
    assert outcome.text.endswith("step s2q: select n from own; <waiting ...>\n"
                                 "failed to complete permutation due to mutually-blocking steps\n")
    assert outcome.exited == "mutually-blocking steps"
    assert outcome.notes == ["The isolation tester exits there (mutually-blocking steps). Then labkit ended the steps "
                             "still running, rolled back s1 and ran the teardowns, which the isolation tester leaves "
                             "undone."]
    assert lab.sessions.open_transactions() == []
    assert lab.value("select count(*) from pg_tables where tablename = 'own'") == 0  # the spec's teardown ran


def test_a_marker_is_not_drawn_as_a_lock_wait_and_a_timeout_is_released_by_nobody(lab):
    outcome = interleave.run(lab, OWN, permutation="s1u s2q(*) s1c")
    marked = next(e for e in outcome.permutations[0].events if e.step == "s2q")
    assert marked.waiting_s is None and marked.held_s is not None and marked.released_by is None
    notes = [a.text for a in outcome.lanes().layout.annotations]
    assert "held by a marker of the permutation (no lock wait)" in notes and not any(
        (note or "").startswith("waits for") for note in notes)
    spec = OWN.replace("step s2q { select n from own; }",
                       "step s2q { select n from own; }\nstep s2t { set lock_timeout = '200ms'; "
                       "update own set n = 0 where id = 1; }").replace(
                       "step s1c { commit; }", "step s1c { commit; }\nstep s1z { select pg_sleep(0.6); }")
    outcome = interleave.run(lab, spec, permutation="s1u s2t s1z s1c")  # s2t gives up while s1 sleeps
    timed = next(e for e in outcome.permutations[0].events if e.step == "s2t")
    assert timed.error == "ERROR:  canceling statement due to lock timeout" and timed.released_by is None


def test_a_transaction_left_open_by_the_last_step_is_rolled_back_and_said(lab):
    outcome = interleave.run(lab, OWN, permutation="s1u s2q")  # s1 began in its setup and never ends
    assert outcome.notes == ["s1's transaction was still open at the end: rolled back, as the isolation tester's "
                             "disconnect would (end it in a step of its own to keep what it did)."]
    assert lab.sessions.open_transactions() == []
