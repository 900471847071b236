"""perf records a run's own backends, or says in one line that it did not: never a stored 0, never a KeyError."""

import subprocess

import pytest

from labkit import perf, records

pytestmark = pytest.mark.linux  # perf is Linux-only; elsewhere the one-line reason is tested in test_runs


def _needs_perf():
    if not perf.availability().available:
        pytest.skip(perf.availability().message)


def test_perf_attached_to_a_server_with_no_run_backends_says_so_in_one_line(lab):
    _needs_perf()
    recording = perf.Recording(lab.server.postmaster_pid(), call_graph=False).start()
    subprocess.run(["sleep", "0.5"], check=True)  # nothing runs on the server meanwhile
    try:
        figures = perf.figures(recording, None)
    finally:
        recording.cleanup()
    assert figures["available"] is False
    assert figures["message"].startswith("perf recorded no samples of the run's backends")
    assert "\n" not in figures["message"]
    run = records.Run("idle", "tests", "ci", "now", extra={"perf": figures})
    # what a lab's cells do with it goes on: one row that says why, no figures made up
    assert perf.table(run).to_dict("records") == [{"perf": figures["message"]}]
    assert perf.recorded(run) is False and perf.share(run, "s_lock") is None
    assert perf.icicle(run).layout.title.text.endswith(figures["message"])


def test_perf_records_the_run_backends_it_attached_to_once_they_connected(lab):
    _needs_perf()
    lab.sql("drop sequence if exists perf_seq2; create sequence perf_seq2")
    run = lab.pgbench("select count(nextval('perf_seq2')) from generate_series(1, 2000);", name="perf-backends",
                      clients=2, duration=6, perf=True, live=False)  # perf starts slowly on a busy machine
    figures = run.extra["perf"]
    assert figures["available"] is True and figures["samples"] > 0, figures.get("message")
    assert perf.recorded(run)
    assert any(row["symbol"] == "nextval_internal" for row in figures["symbols"]), figures["symbols"][:10]


def test_perfs_own_check_runs_before_the_run_not_when_perf_attaches(lab):
    """The DWARF check runs perf once (a second or more): paid during the run, it started perf that much later."""
    _needs_perf()
    from labkit import pgbench, runner

    perf.dwarf_works.cache_clear()
    spec = pgbench.parse_options("", script="select 1;", name="perf-early", clients=2, duration_s=2,
                                 defaults=lab.profile.run_defaults())
    attach = runner.PgbenchRunner(lab._target())._perf_attach(spec)
    assert attach is not None and not attach.is_alive()  # not started yet: nothing runs
    assert perf.dwarf_works.cache_info().currsize == 1  # already answered, before any run
