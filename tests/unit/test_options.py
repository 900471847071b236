"""pgbench options as a student types them: accepted, or refused with one clear line."""

from pathlib import Path

import pytest

from labkit.errors import UsageError
from labkit.pgbench import Script, Spec, build_argv, check_capacity, parse_options


def test_common_options():
    spec = parse_options("-c 64 -j 4 -T 15 -M prepared --name plain -D id=5", script="select 1;")
    assert (spec.clients, spec.jobs, spec.duration_s, spec.mode, spec.name) == (64, 4, 15, "prepared", "plain")
    assert spec.defines == (("id", "5"),)
    assert spec.scripts[0].text == "select 1;"


def test_inline_values_and_long_forms():
    spec = parse_options(["-c8", "--time=3", "--protocol=extended", "--rate", "500"], script="select 1;")
    assert (spec.clients, spec.duration_s, spec.mode, spec.rate) == (8, 3, "extended", 500)


def test_scripts_from_files_with_weights(tmp_path: Path):
    (tmp_path / "a.sql").write_text("select 1;")
    (tmp_path / "b.sql").write_text("select 2;")
    spec = parse_options(["-f", f"{tmp_path}/a.sql@3", "-f", f"{tmp_path}/b.sql", "-T", "2"])
    assert [(s.name, s.weight) for s in spec.scripts] == [("a.sql", 3), ("b.sql", 1)]
    argv = build_argv(spec, [Path("0-a.sql"), Path("1-b.sql")])
    assert argv[-4:] == ["-f", "0-a.sql@3", "-f", "1-b.sql@1"]


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("--bogus", "Unknown pgbench option '--bogus'"),
        ("-P 5", "progress every second"),
        ("-h localhost", "labkit.start()"),
        ("-T 5 -t 10", "either -T"),
        ("-M fast", "-M must be simple, extended or prepared"),
        ("-c", "needs a value"),
        ("-c many", "needs a number"),
        ("-f /nonexistent/x.sql", "does not exist"),
        ("-c 0", "at least 1"),
        ("-c 4 -j 8", "-j must be between 1"),
        ("--no-log --sampling-rate 0.1", "--sampling-rate samples the transaction log, which --no-log turns off"),
        ("--sampling-rate 2", "--sampling-rate is the share of transactions logged"),
    ],
)
def test_bad_options_say_what_to_do(line, words):
    with pytest.raises(UsageError, match=words.replace("(", r"\(").replace(")", r"\)")):
        parse_options(line, script="select 1;")


def test_empty_script_is_refused():
    with pytest.raises(UsageError, match="script is empty"):
        parse_options("-c 2", script="  \n")


def test_too_many_clients_for_the_server():
    spec = Spec((Script("a.sql", "select 1;"),), clients=500, duration_s=5)
    with pytest.raises(UsageError, match=r"500 clients need 500 connections but only 97 are free.*need_connections"):
        check_capacity(spec, 97)


def test_argv_always_reports_progress_and_logs():
    spec = parse_options("-c 2 -T 3 --sampling-rate 0.1", script="select 1;")
    argv = build_argv(spec, [Path("s.sql")], log_prefix=Path("tx"))
    assert argv[:4] == ["-n", "-r", "-P", "1"]
    assert ["-l", "--log-prefix", "tx", "--sampling-rate", "0.1"] == argv[argv.index("-l"):argv.index("-l") + 5]
    assert argv[-2:] == ["-f", "s.sql@1"]  # no server, no database: those travel in libpq's environment
    no_log = parse_options("-c 2 -T 3 --no-log", script="select 1;")
    assert "-l" not in build_argv(no_log, [Path("s.sql")], log_prefix=Path("tx"))


# One set of run defaults: the profile's, for Lab.pgbench, %%pgbench and the CLI alike.
PROFILE = {"clients": 16, "duration_s": 15}


def test_options_win_over_the_profiles_defaults():
    spec = parse_options("-c 8 -T 30", script="select 1;", defaults=PROFILE)
    assert (spec.clients, spec.duration_s, spec.transactions) == (8, 30, None)


def test_transactions_are_kept_and_take_no_default_duration():
    spec = parse_options("-t 100", script="select 1;", defaults=PROFILE)
    assert (spec.clients, spec.duration_s, spec.transactions) == (16, None, 100)


def test_nothing_given_takes_the_profiles_clients_and_duration():
    spec = parse_options("", script="select 1;", defaults=PROFILE)
    assert (spec.clients, spec.duration_s, spec.name) == (16, 15, "run")


def test_keywords_go_with_the_options_and_must_agree_with_them():
    spec = parse_options("-T 30 --name x", script="select 1;", clients=4, defaults=PROFILE)
    assert (spec.clients, spec.duration_s, spec.name) == (4, 30, "x")
    with pytest.raises(UsageError, match="clients is given twice, as 4 and in the options as 8: keep one"):
        parse_options("-c 8", script="select 1;", clients=4, defaults=PROFILE)
    with pytest.raises(UsageError, match="either -T"):
        parse_options("-t 100", script="select 1;", duration_s=5, defaults=PROFILE)


def test_the_hint_lists_every_option_the_parser_takes():
    with pytest.raises(UsageError) as raised:
        parse_options("--bogus", script="select 1;")
    for option in ("--verbose-errors", "--exit-on-abort", "--connect", "-C", "--no-log", "-D", "-f"):
        assert f" {option} " in f" {raised.value} ".replace(".", " ")


def test_threads_follow_the_cores_this_process_may_use(monkeypatch):
    """In a container limited to one CPU (Binder), -j is 1 whatever the host has."""
    from labkit import profiles

    spec = parse_options(["-c", "8", "-T", "1"], script="select 1;")
    monkeypatch.setattr(profiles, "machine_size", lambda: (1.0, 2 << 30))
    assert spec.threads == 1
    monkeypatch.setattr(profiles, "machine_size", lambda: (4.0, 8 << 30))
    assert spec.threads == 4


@pytest.mark.parametrize("chosen, words", [({"clients": "x"}, "-c (clients) must be a number, not 'x'"),
                                           ({"duration_s": "5s"}, "-T (seconds) must be a number, not '5s'"),
                                           ({"clients": 2, "jobs": "2"}, "-j (threads) must be a number")])
def test_a_count_given_as_text_in_a_code_cell_is_one_line(chosen, words):
    with pytest.raises(UsageError, match=words.replace("(", r"\(").replace(")", r"\)")):
        parse_options("", script="select 1;", **chosen)


def test_a_session_option_it_does_not_take_is_one_line():
    from labkit.sessions import Sessions

    sessions = Sessions(conninfo=lambda: "host=/nonexistent-labkit-test dbname=none connect_timeout=1")
    with pytest.raises(UsageError, match=r"takes lock_timeout and statement_timeout .*not bogus"):
        sessions.get("T1", bogus="1s")
    assert sessions.sessions == {}
