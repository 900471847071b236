"""``lab = labkit.start()``: a notebook's handle on the server, its database and its runs."""

from __future__ import annotations

import atexit
import functools
import hashlib
import logging
import os
import re
import sys
import time

import psycopg
from psycopg import sql as pgsql

from . import db, pgbench, records, run_record, runner, units
from .backend import (
    SETTINGS_THAT_MATTER,
    Server,
    lab_settings,
    platform_messages,
    server_for_backend,
    system_of,
    system_of_version,
)
from .binaries import program
from .errors import LabkitError, RunFailed, ServerGone, ServerStartFailed, UsageError, connection_problem
from .pgbench import Spec
from .probes import WAIT_EVENTS, Probe, plain_value
from .profiles import SPARE_CONNECTIONS, Profile, current, default_name
from .queries import query
from .records import Repeats
from .sessions import Failed, Sessions, Waiting

log = logging.getLogger(__name__)
EXTENSIONS = ("pg_stat_statements", "pageinspect", "pgstattuple")
log = logging.getLogger(__name__)


def database_name(notebook: str) -> str:
    """The notebook's own database.

    A name with letters outside ASCII keeps them in a short digest, so that two such notebooks
    ("Übung", "Öffnung") never share a database.

    >>> database_name("02-flash-sale")
    'lab_02_flash_sale'
    >>> database_name("Übung 1"), database_name("Öbung 1")
    ('lab_bung_1_3aae8071', 'lab_bung_1_3128d901')
    """
    slug = re.sub(r"[^a-z0-9]+", "_", notebook.lower()).strip("_")
    if not notebook.isascii():
        return f"lab_{slug[:41]}_{hashlib.sha256(notebook.encode()).hexdigest()[:8]}".replace("lab__", "lab_")
    return "lab_" + (slug or "scratch")[:50]


def _notebook_name() -> str:
    # jupyter-server tells the kernel which notebook it runs (JupyterLab 4, jupyter-server 2).
    session = os.environ.get("JPY_SESSION_NAME", "")
    if session:
        return os.path.splitext(os.path.basename(session))[0]
    return "scratch"


def server_gone(lab: Lab, error: BaseException) -> ServerGone | None:
    """:class:`ServerGone` (one line, what to do) if ``error`` is a lost connection to a server that is not running."""
    if db.is_lost(error) and not lab.server.running():
        return ServerGone(f"The lab server is not running (it was stopped, or the computer slept): "
                          f"run labkit.start({lab.notebook!r}) again.")
    return None


def _server_must_answer(method):
    """Turn "the server is gone" into :class:`ServerGone` (one line, what to do); other errors pass."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except psycopg.OperationalError as error:
            gone = server_gone(self, error)
            if gone is not None:
                raise gone from None
            raise

    return wrapper


# Where the server listens and who may connect: labkit's own to decide (it connects there itself, and opens
# nothing to the network); lab.set refuses them.
WHERE_IT_LISTENS = frozenset({"port", "listen_addresses", "unix_socket_directories", "unix_socket_group",
                              "unix_socket_permissions", "hba_file", "ident_file", "config_file", "data_directory",
                              "ssl"})

class Lab:
    """A notebook's lab: the server, the notebook's own database, sessions and runs."""

    def __init__(self, server: Server, notebook: str, profile: Profile, *, messages: list[str]):
        self.server = server
        self.notebook = notebook
        self.profile = profile
        self.database = database_name(notebook)
        self.messages = messages
        self.sessions = Sessions(lambda: self.conninfo, gone=lambda error: server_gone(self, error))
        self.last_run: records.Run | None = None
        self.arms: dict = {}  # %%pgbench --arm cells, by name: the arms lab.experiment([...]) runs

    @property
    def conninfo(self) -> str:
        """The lab database's connection string (asked anew: a restarted server may have a new port)."""
        return self.server.conninfo(self.database)


    # -- SQL

    @_server_must_answer
    def connect(self, **kwargs) -> psycopg.Connection:
        """A new connection to the lab database (autocommit unless told otherwise)."""
        return db.connect(self.conninfo, **kwargs)

    @_server_must_answer
    def sql(self, statement: str, params=None, *, session: str = "main"):
        """Run SQL in a named session; a DataFrame when it returns rows, else the command tag.

        A database error is raised as psycopg raised it (its ``sqlstate`` tells which);
        ``%%sql`` prints it as the server wrote it instead. A statement that blocks on a lock
        raises :class:`UsageError` here: use ``%%sql --session`` or :meth:`session` for steps
        that are meant to block.
        """
        outcome = self.session(session).run(statement, params)
        if isinstance(outcome, Failed):
            if outcome.exception is not None:
                raise outcome.exception
            raise UsageError(outcome.message())
        if isinstance(outcome, Waiting):
            raise UsageError(outcome.message())
        return outcome.frame if outcome.frame is not None else outcome.message()

    def copy(self, table: str, rows, columns: list[str] | None = None) -> int:
        """Load ``rows`` (an iterable of tuples) into ``table`` with COPY; returns how many rows.

        COPY streams the rows in one command: far faster than INSERTs for generated data sets.
        """
        target = pgsql.SQL("copy {} {} from stdin").format(
            pgsql.SQL(table),
            pgsql.SQL("({})").format(pgsql.SQL(", ").join(map(pgsql.Identifier, columns))) if columns else pgsql.SQL(""))
        count = 0
        with self.connect(autocommit=False) as connection, connection.cursor() as cursor:
            with cursor.copy(target) as copy:
                for row in rows:
                    copy.write_row(row)
                    count += 1
            connection.commit()
        return count

    def value(self, statement: str, params=None):
        """The first column of the first row."""
        with self.connect() as connection:
            row = connection.execute(statement, params).fetchone()
        return row[0] if row else None

    def check(self, statement: str, run: records.Run | None = None):
        """Run a one-row query after a run and note its columns in the run's record (default: the last run).

        E.g. ``lab.check("select count(*) as consumed from done")`` adds ``extra.consumed``.
        Returns the row as a DataFrame.
        """
        import pandas as pd

        run = run or self.last_run
        if run is None:
            raise UsageError("No run to note the check in yet: run a %%pgbench cell first.")
        try:
            frame = pd.read_sql(statement, self.engine())
        except Exception as error:  # noqa: BLE001 - SQLAlchemy wraps psycopg's error; show the server's words
            gone = server_gone(self, db.server_error(error))
            if gone is not None:
                raise gone from None
            raise UsageError(f"The check failed: {db.message(db.server_error(error))}") from None
        if len(frame) != 1:
            raise UsageError(f"A check must return exactly one row; this one returned {len(frame)}.")
        figures = {str(column): plain_value(value) for column, value in frame.to_dict("records")[0].items()}
        run.note(**figures)
        return pd.DataFrame([{"run": run.name, **figures}])

    @_server_must_answer
    def session(self, name: str, **timeouts):
        """The named session (created on first use), e.g. ``lab.session("T1")``.

        ``lock_timeout`` and ``statement_timeout`` (e.g. ``"2s"``) become the session's own, for
        its later statements; ``%%sql --lock-timeout`` sets one for a single cell.
        """
        return self.sessions.get(name, **timeouts)

    def engine(self):
        """A SQLAlchemy engine on the lab database: ``pandas.read_sql(sql, lab.engine())`` reads a table.

        :meth:`check` reads its row this way.
        """
        return db.engine(self.conninfo)

    # -- settings

    @_server_must_answer
    def settings(self, *names: str):
        """The settings that matter (or the ones named), with where each value comes from."""
        import pandas as pd

        wanted = list(names or SETTINGS_THAT_MATTER)
        with db.connect(self.server.admin_conninfo()) as connection:
            rows = connection.execute(query("settings"), {"names": wanted}).fetchall()
        return pd.DataFrame(rows, columns=["name", "setting", "unit", "source", "pending_restart", "context"])

    @_server_must_answer
    def set(self, **settings):
        """Change server settings (ALTER SYSTEM, reload; restart when PostgreSQL requires it).

        Restarting drops every connection to the server, also other notebooks'.
        """
        import pandas as pd

        settings = {name.lower(): value for name, value in settings.items()}  # PostgreSQL's names ignore case
        where = sorted(name for name in settings if name in WHERE_IT_LISTENS)
        if where:
            raise UsageError(f"lab.set cannot change {', '.join(where)}: labkit decides where its server listens and "
                             "who may connect (a Unix socket of its own, or 127.0.0.1 with a password; nothing on the "
                             "network), and connects there itself. Other settings can be changed.")
        current = self.settings(*settings).set_index("name")
        before = current["setting"].to_dict()
        unknown = [name for name in settings if name not in before]
        if unknown:
            raise UsageError(f"Unknown setting(s): {', '.join(unknown)}. Check the name in pg_settings.")
        needs_restart = [name for name in settings if current.loc[name, "context"] == "postmaster"]
        if needs_restart and self.server.can_restart:
            self._refuse_restart_during_other_runs(needs_restart)
        try:
            with db.connect(self.server.admin_conninfo()) as connection:
                loaded = db.one(connection, query("conf_load_time"))
                # what ALTER SYSTEM held for them before: put back if a value is refused or the server will not start
                # with the new values (pg_file_settings is a superuser's view: None where this role may not read it)
                try:
                    altered: dict[str, str] | None = dict(connection.execute(
                        query("altered_settings"), {"names": [n.lower() for n in settings]}).fetchall())
                except psycopg.errors.InsufficientPrivilege:
                    altered = None
                done: list[str] = []
                try:
                    for name, value in settings.items():
                        connection.execute(pgsql.SQL("alter system set {} = {}").format(
                            pgsql.Identifier(name), pgsql.Literal(str(value))))
                        done.append(name)
                except psycopg.Error:
                    # one value refused: the ones already written are put back, or the next restart (of this
                    # call or any later one) would start with them and no pending restart would have said so
                    if altered is not None:
                        _put_back(connection, done, altered)
                    elif done:
                        self.messages.append(f"ALTER SYSTEM keeps {', '.join(done)} as set before the refused value; "
                                             f"ALTER SYSTEM RESET puts each back to the server's own configuration.")
                    raise
                connection.execute("select pg_reload_conf()")
                _wait_for_reload(connection, loaded)
                self._undo_if_no_one_can_connect(connection, settings, altered)
            log.info("set %s with ALTER SYSTEM", ", ".join(f"{name}={value!r}" for name, value in settings.items()))
        except psycopg.Error as error:
            raise LabkitError(f"Could not change the settings: {db.message(error)}") from None
        restart = bool(self.settings(*settings)["pending_restart"].any())
        restarted = False
        if restart and not self.server.can_restart:
            self.messages.append(f"These settings need a restart, which labkit does not do to the {self.server.kind} "
                                 "server.")
        elif restart:
            # this notebook's sessions reconnect by themselves, as other notebooks' do (a lost transaction is said)
            log.info("restarting the server for %s", ", ".join(settings))
            try:
                self.server.restart()
            except ServerStartFailed as failure:
                raise self._refused(settings, {name.lower(): (altered or {}).get(name.lower()) for name in settings},
                                    failure) from None
            restarted = True
        after = self.settings(*settings).set_index("name")["setting"].to_dict()
        return pd.DataFrame([{"name": n, "before": before.get(n), "after": after.get(n), "restarted": restarted}
                             for n in settings])

    def _undo_if_no_one_can_connect(self, connection, settings: dict, altered: dict[str, str] | None) -> None:
        """After the reload: where a new connection is refused, the values are put back and the student told why.

        A ``session_preload_libraries`` that is not there ends every new connection; ``connection``,
        opened before, still works and puts the values back.

        Left in ALTER SYSTEM's file, such a value would lock every notebook out of the server.
        """
        try:
            db.connect(self.server.admin_conninfo()).close()
            return
        except psycopg.OperationalError as error:
            why = db.message(error)
            why = why.split("FATAL:", 1)[-1].strip()  # libpq's "connection to server ... failed: FATAL:  <reason>"
        if "too many clients" in why or "connection slots" in why:  # full, not refused: the setting is not the cause
            return
        asked = ", ".join(f"{name}={value!r}" for name, value in settings.items())
        if altered is None:  # this role may not read what ALTER SYSTEM held: reset to the server's own configuration
            altered = {}
        loaded = db.one(connection, query("conf_load_time"))
        _put_back(connection, list(settings), altered)
        connection.execute("select pg_reload_conf()")
        _wait_for_reload(connection, loaded)
        back = ", ".join(f"{name} back to {altered[name.lower()]!r}" if altered.get(name.lower()) is not None
                         else f"{name} back to its default" for name in settings)
        raise UsageError(f"With {asked} the server refuses every new connection ({why}): labkit put {back}. "
                         "Choose another value.")

    def _refused(self, settings: dict, before: dict[str, str | None], failure: ServerStartFailed) -> LabkitError:
        """The error to raise when the server would not start with new settings: they are undone first, if labkit can.

        Left in ALTER SYSTEM's file, such a value would keep the server from starting ever after, in
        every notebook.
        """
        asked = ", ".join(f"{name}={value!r}" for name, value in settings.items())
        why = failure.reason or failure.short
        back = ", ".join(f"{name} back to {value!r}" if value is not None else f"{name} back to its default"
                         for name, value in before.items())
        never_stopped = self.server.running()  # pg_ctl stop gave up: the server runs on, or is still stopping
        try:
            undone = self.server.undo_settings(before)
        except ServerStartFailed as again:
            return ServerStartFailed(f"The server would not start with {asked} ({why}), nor once labkit had put them "
                                     f"back: {again.short}", detail=again.detail, reason=again.reason)
        if not undone:
            return failure
        if never_stopped:
            return UsageError(f"The server did not stop for the restart {asked} needs ({why}): labkit put {back} in "
                              "ALTER SYSTEM's file, which the server reads when it starts. It runs as before, or is "
                              "still stopping (labkit.start() then starts it again). Try again once no run is going.")
        return UsageError(f"The server would not start with {asked}: {why}. labkit put {back} and started the "
                          "server again (sessions connect again by themselves): choose another value.")

    def _refuse_restart_during_other_runs(self, names: list[str]) -> None:
        """A restart would stop another notebook's pgbench run: refuse, naming it, before changing anything."""
        registry = self.server.pgbench_registry()
        if registry is None:
            return
        self.server.reap_orphans()  # a dead kernel's pgbench is nobody's run: it goes now
        others = sorted({entry.get("notebook") or f"a kernel (pid {entry.get('owner')})"
                         for entry in registry.live_entries()
                         if entry.get("pid") and entry.get("owner") != os.getpid()})
        if others:
            raise UsageError(f"Changing {', '.join(names)} restarts the server, which would stop the pgbench run "
                             f"of {', '.join(others)} going on now: run this cell again once it has finished.")

    def server_info(self) -> dict:
        frame = self.settings()
        values = dict(zip(frame["name"], frame["setting"]))
        return {"backend": self.server.kind, "version": values.pop("server_version", None), "settings": values}

    # -- pgbench

    def pgbench(self, script: str = "", *, name: str | None = None, clients: int | None = None,
                duration: float | None = None, transactions: int | None = None, jobs: int | None = None,
                mode: str | None = None, options: str | list[str] = "", probes: list[Probe] | None = None,
                live: bool | None = None, work: str | None = None, perf: bool = False, hold_sessions: bool = False,
                setup=None, repeats: int | None = None, after=None):
        """Run ``script`` with pgbench; returns the :class:`~labkit.records.Run` (also saved).

        ``repeats`` runs it that many times, one after another (``setup`` before each), and returns
        the :class:`~labkit.records.Repeats`: the runs kept together in the records, so that
        comparisons show their spread (``lab.verdict``). Without it a run is run once; a lab passes its
        profile's number for its key comparisons (``repeats=P.repeats``: 2 under ci, 3 under laptop).
        ``after`` is called as ``after(run)`` once each run is recorded (e.g. to note a check in it).

        ``options`` takes any pgbench option as on the command line (e.g. ``"-c 8 -T 30 -D n=5"``); a
        keyword argument and an option that both set the same thing must agree. What neither sets
        comes from the profile (its clients and duration), as in ``%%pgbench``. The name defaults
        to ``run``.
        ``probes`` defaults to the wait-event probe; pass ``[]`` for none.
        ``live`` shows the live chart (default: when running in a notebook).
        ``work`` is SQL returning one number, the work done so far (e.g. ``select count(*) from done``):
        it is sampled every second and before and after the run, giving ``extra.work``,
        ``extra.goodput`` (work per second, comparable to tps) and ``extra.useful`` (work per transaction).
        ``perf`` profiles the server's processes during the run (``extra.perf``; see :mod:`labkit.perf`).
        A run does not start while one of this notebook's sessions sits idle in a transaction (its
        clients would wait behind that session's locks); ``hold_sessions`` runs anyway, for an
        experiment that keeps a transaction open on purpose.
        ``setup`` is SQL run just before pgbench starts (e.g. ``call refill(20000)``), so that a run
        can be repeated alone, or a function called as ``setup(lab)`` (a rebuild with VACUUM, which
        one SQL string cannot hold).
        """
        spec = pgbench.parse_options(options, script=script, name=name, clients=clients,
                                     duration_s=duration, transactions=transactions, jobs=jobs, mode=mode,
                                     defaults=self.profile.run_defaults())
        return self.repeat_spec(spec, repeats, probes=probes, live=live, work=work, perf=perf,
                                hold_sessions=hold_sessions, setup=setup, after=after)

    def repeat_spec(self, spec: Spec, repeats: int | None = None, *, after=None, **options):
        """Run ``spec`` ``repeats`` times (None: once, returning the Run); the repeats share one series."""
        if repeats is None or repeats == 1:
            run = self.run_spec(spec, **options)
            if after is not None:
                after(run)
            return run
        if not isinstance(repeats, int) or repeats < 1:
            raise UsageError(f"repeats={repeats!r}: give a whole number of runs, 1 or more.")
        series = f"{spec.name}@{records.now_iso()}"
        group = records.Repeats()
        for number in range(1, repeats + 1):
            run = self.run_spec(spec, tags={"repeat": number, "repeats": repeats, "series": series}, **options)
            if after is not None:
                after(run)
            group.append(run)
        return group

    @_server_must_answer
    def run_spec(self, spec: Spec, *, probes: list[Probe] | None = None, live: bool | None = None,
                 work: str | None = None, perf: bool = False, observer: runner.Observer | None = None,
                 hold_sessions: bool = False, setup=None, tags: dict | None = None):
        """Run a checked :class:`~labkit.pgbench.Spec` (what ``%%pgbench`` does).

        ``observer`` hears the progress instead of the live chart (e.g. :class:`labkit.live.Printer`).
        ``setup`` runs in the notebook's main session after the open-session check, before pgbench.
        ``tags`` are record fields set before it is saved (a repeat's number and series).
        """
        from . import live as live_module

        if not hold_sessions:
            open_now = self.sessions.open_transactions()
            if open_now:
                raise UsageError(f"Not started: {open_now[0].message()} Or run with --hold-sessions "
                                 "(hold_sessions=True) to keep it open on purpose.")
        if callable(setup):
            setup(self)
        elif setup:
            self.sql(setup)
        probes = [WAIT_EVENTS] if probes is None else list(probes)
        view = None
        if observer is None and (live if live is not None else live_module.in_notebook()):
            label = spec.name if not tags else f"{spec.name} ({tags['repeat']} of {tags['repeats']})"
            view = live_module.LiveView(label, spec.clients, live_module.probe_names(probes, work),
                                        planned_s=spec.duration_s)
        try:
            run = runner.PgbenchRunner(self._target()).run(spec, probes=probes, observer=view or observer,
                                                           work=work, perf=perf, tags=tags)
        except KeyboardInterrupt as error:
            # what was measured is the last run now: a check after the interrupt must not note into the run before
            self.last_run = getattr(error, "run", None)
            if view is not None and self.last_run is not None and not self.last_run.interrupted:
                view.finished(self.last_run)  # it had ended when the interrupt came: its record is whole
            elif view is not None:
                view.stopped("interrupted; pgbench was stopped and its backends terminated.")
            raise
        except LabkitError as error:
            if error.run is not None:  # measured, but its record could not be saved
                self.last_run = error.run
            if view is not None:
                view.stopped("pgbench stopped with an error (below).")
            raise
        except BaseException as error:
            if view is not None:
                view.stopped(f"the run failed ({type(error).__name__}, below).")
            raise
        self.last_run = run
        if view is not None:
            view.finished(run)
        if run.aborted_clients and self._server_stopping():  # its clients were ended by the server's stop
            gone = ServerGone(f"The lab server stopped during run {spec.name!r} ({run_record.aborted_sentence(run)}): "
                              f"its record is kept as far as it went (lab.last_run); run labkit.start({self.notebook!r}) "
                              "again.")
            gone.run = run
            raise gone
        stuck = None if hold_sessions else run_record.no_progress(run)  # held on purpose: waiting is the point
        if stuck:
            raise RunFailed(stuck)
        return run

    def _server_stopping(self) -> bool:
        """Whether the server is stopped or shutting down (it refuses new connections with 57P03), not merely up."""
        if not self.server.running():
            return True
        try:
            with db.connect(self.server.admin_conninfo(), timeout_s=5):
                return False
        except psycopg.OperationalError as error:  # a refusal at connection time may carry no sqlstate: its words then
            return (error.sqlstate == "57P03" or "the database system is shutting down" in str(error)
                    or not self.server.running())

    def _target(self) -> runner.Target:
        return runner.Target(
            conninfo=self.conninfo, environment=self.server.libpq_environment(self.database),
            pgbench=program("pgbench"), notebook=self.notebook, profile=self.profile.name,
            server=self.server_info(), registry=self.server.pgbench_registry(),
            postmaster_pid=self.server.postmaster_pid(), log_file=getattr(self.server, "log_file", None),
        )

    def experiment(self, arms, *, metric: str = "tps", kind: str | None = None, repeats: int | None = None,
                   budget_s: float | None = None, order: str = "alternate", seed: int | None = None,
                   setup=None, after=None, live: bool | None = False, **run_options):
        """Run arms interleaved (A B, B A, ...) and judge them: a :class:`labkit.experiment.Result`.

        ``arms``: ``{"name": script, ...}``, or the names of ``%%pgbench --arm`` cells, or
        :class:`labkit.experiment.Arm` objects. ``metric`` (``tps``, ``goodput``, a latency, or any
        ``extra`` figure) and its ``kind`` (``rate`` or ``cost``, from the metric by default) decide
        how the runs are judged. ``repeats``: rounds, each arm once per round (default: the
        profile's). ``budget_s``: add rounds until the verdict decides or the budget is spent.
        ``setup(lab, arm)`` runs before each run (a rebuild, a CHECKPOINT), ``after(lab, run)`` after
        each. The other keywords (``clients``, ``duration``, ``mode``, ``options``, ``probes``,
        ``work``, ``hold_sessions``) are :meth:`pgbench`'s, for every arm.
        """
        from . import experiment

        chosen = []
        for arm in (arms.items() if isinstance(arms, dict) else arms):
            if isinstance(arm, experiment.Arm):
                chosen.append(arm)
            elif isinstance(arm, tuple):
                chosen.append(experiment.Arm(arm[0], arm[1]) if isinstance(arm[1], str) else arm[1])
            elif arm in self.arms:
                chosen.append(self.arms[arm])
            else:
                raise UsageError(f"No arm named {arm!r}: define it with a %%pgbench --arm --name {arm} cell, or "
                                 "give the arms as {name: script}.")
        unknown = set(run_options) - {"clients", "duration", "transactions", "jobs", "mode", "options", "probes",
                                      "work", "perf", "hold_sessions"}
        if unknown:
            raise UsageError(f"Unknown option(s) {', '.join(sorted(unknown))} for lab.experiment.")
        biggest = max((arm.spec.clients if arm.spec is not None else run_options.get("clients") or self.profile.clients)
                      for arm in chosen) if chosen else 0
        if biggest:
            self.need_connections(biggest)
        return experiment.run(self, chosen, metric=metric, kind=kind, repeats=repeats, budget_s=budget_s,
                              order=order, seed=seed, setup=setup, after=after, defaults=run_options, live=live)

    @_server_must_answer
    def per_call(self, statements: dict[str, str], *, calls: int, rounds: int = 4, min_s: float = 1.0):
        """The CPU time one call costs in each statement, in one session, rounds alternating.

        E.g. ``lab.per_call({"volatile": "select seq_bulk('s100', 10000)", "stable": ...}, calls=10000)``;
        see :func:`labkit.experiment.per_call`.
        """
        from . import experiment

        return experiment.per_call(self, statements, calls=calls, rounds=rounds, min_s=min_s)

    def sweep(self, scripts: dict[str, str], clients: list[int], *, duration: float | None = None,
              mode: str | None = None, work: str | None = None, before=None, after=None,
              probes: list[Probe] | None = None, hold_sessions: bool = False, repeats: int = 1):
        """Run every script at every number of clients; returns the runs (saved as ``sweep-<name>``).

        At each number of clients the scripts are interleaved (A B, B A ... over the repeats, and
        the first script alternates from one point to the next), so that a change of load on the
        machine falls on every script alike.
        before: called as ``before(lab, name, clients)`` ahead of each run (e.g. to vacuum).
        after: called as ``after(lab, run)`` once each run is recorded (e.g. to note checks in it).
        repeats: runs of each point (the sweep chart draws their range).
        Draw the result with :func:`labkit.charts.sweep`. Progress is printed one line per point.
        """
        from . import experiment

        if not clients:
            raise UsageError("lab.sweep needs at least one number of clients, e.g. clients=[1, 2, 4].")
        self.need_connections(max(clients))
        runs: list[records.Run] = []
        names = list(scripts)
        for index, count in enumerate(clients):
            started = records.now_iso()
            points = {name: records.Repeats() for name in names}
            order = experiment.plan(names, repeats, first_round=index % 2)
            for position, name in enumerate(order, start=1):
                if before is not None:
                    before(self, name, count)
                spec = pgbench.parse_options("", script=scripts[name], name=f"sweep-{name}", clients=count,
                                             duration_s=duration, mode=mode, defaults=self.profile.run_defaults())
                number = len(points[name]) + 1
                tags = {"repeat": number, "repeats": repeats, "series": f"sweep-{name}-{count}@{started}",
                        "experiment": f"sweep-{count}@{started}", "order": position} if repeats > 1 else None
                run = self.run_spec(spec, probes=[] if probes is None else probes, live=False, work=work,
                                    hold_sessions=hold_sessions, tags=tags)
                run.note(method=name)
                if after is not None:
                    after(self, run)
                points[name].append(run)
            for name in names:
                point = points[name]
                runs.extend(point)
                spread = point.spread("tps") if repeats > 1 else None
                goodput = point.mean("goodput")
                print(f"{name:>14} {count:>5} clients: {point.tps or 0:>10,.0f} tps"
                      + (f" ({spread[0]:,.0f}–{spread[1]:,.0f})" if spread else "")
                      + (f", goodput {goodput:>10,.0f}/s" if goodput is not None else ""), flush=True)
        return runs

    @_server_must_answer
    def need_connections(self, clients: int) -> None:
        """Make sure ``clients`` more connections fit (raising max_connections, with a restart, if not).

        A restart drops every connection to the server, also other notebooks'; labkit says so.
        """
        spare = SPARE_CONNECTIONS
        free = runner.free_connections(self.conninfo)
        if free >= clients + spare:
            return
        current = int(self.value("show max_connections"))
        wanted = current + clients + spare - free
        if not self.server.can_restart:
            raise UsageError(f"{clients} clients need {clients + spare} free connections; the server has {free}. "
                             f"Raise max_connections to at least {wanted} on it (labkit does not change it).")
        self.set(max_connections=wanted)
        self.messages.append(f"Raised max_connections from {current} to {wanted} (the server restarted).")

    # -- records

    def runs(self, *, all_notebooks: bool = False):
        """This notebook's saved runs as a table (newest last)."""
        return records.runs_frame(self.records(all_notebooks=all_notebooks))

    def records(self, names: list[str] | None = None, *, all_notebooks: bool = False,
                any_profile: bool = False) -> list[records.Run]:
        """Saved runs of this notebook under this lab's profile (the newest of each name when ``names`` is given).

        Runs of another profile (another size of experiment) are left out, so that a comparison
        never mixes ``ci`` and ``laptop`` runs; ``any_profile=True`` takes them all.
        """
        found = records.list_runs(notebook=None if all_notebooks else self.notebook)
        if not any_profile:
            found = [run for run in found if run.profile == self.profile.name]
        if names is None:
            return found
        newest = records.latest(found)
        missing = [name for name in names if name not in newest]
        if missing:
            raise UsageError(f"No saved run named {', '.join(missing)} in {self.notebook} under the "
                             f"{self.profile.name!r} profile: run it first.")
        return [newest[name] for name in names]

    def groups(self, names: list[str] | None = None) -> dict[str, Repeats]:
        """The newest repeats of each name (one run where it was not repeated), under this lab's profile."""
        found = self.records()
        groups = records.latest_groups(found)
        if names is None:
            return groups
        missing = [name for name in names if name not in groups]
        if missing:
            raise UsageError(f"No saved run named {', '.join(missing)} in {self.notebook} under the "
                             f"{self.profile.name!r} profile: run it first.")
        return {name: groups[name] for name in names}

    def compare(self, names: list[str] | None = None, *, metric: str = "tps"):
        """A chart of the newest repeats of each name (default: every name of this notebook), with their spread."""
        from .charts import compare

        runs = [run for group in self.groups(names).values() for run in group]
        if not runs:
            raise UsageError("No saved runs yet in this notebook: run a %%pgbench cell first.")
        return compare(runs, metric=metric)

    @_server_must_answer
    def steps(self, spec, *, permutation: str | None = None, step_timeout_s: float | None = None):
        """Run an interleaving (an isolation spec's text or a :class:`labkit.interleave.Spec`) step by step.

        Returns the :class:`labkit.interleave.Outcome`: its ``text`` as PostgreSQL's isolation tester
        prints it, its events, and ``lanes()`` to draw it. ``%%steps`` does the same in a cell.
        """
        from . import interleave

        return interleave.run(self, spec, permutation=permutation,
                              step_timeout_s=step_timeout_s or interleave.DEFAULT_STEP_TIMEOUT_S)

    def verdict(self, a: str, b: str, *, metric: str = "tps", kind: str | None = None):
        """How run ``b`` compares with run ``a`` on ``metric`` (their newest repeats), and how sure that is.

        Returns a :class:`labkit.verdict.Verdict`: its sentence says the ratio, its interval and whether
        it stands beyond the noise; runs of one experiment are compared pair by pair (their arms were
        interleaved), runs of two separate cells are not, and the sentence says so.
        """
        from .verdict import compare

        groups = self.groups([a, b])
        return compare(groups[a], groups[b], metric=metric, kind=kind)

    # -- housekeeping

    def close(self) -> None:
        self.sessions.close()

    def __repr__(self) -> str:
        return (f"<Lab {self.notebook!r}: database {self.database} on the {self.server.kind} server, "
                f"profile {self.profile.name}>")

    def _repr_html_(self) -> str:
        import html

        lines = "".join(f"<li>{html.escape(message)}</li>" for message in self.messages)
        return (f"<b>Lab ready</b>: database <code>{self.database}</code> on the {self.server.kind} server "
                f"(profile <code>{self.profile.name}</code>).<ul>{lines}</ul>")


def _put_back(connection, names: list[str], altered: dict[str, str]) -> None:
    """ALTER SYSTEM as it was for these settings (``altered``: their values in postgresql.auto.conf before)."""
    for name in names:
        old = altered.get(name.lower())
        if old is None:
            connection.execute(pgsql.SQL("alter system reset {}").format(pgsql.Identifier(name)))
        else:
            connection.execute(pgsql.SQL("alter system set {} = {}").format(pgsql.Identifier(name), pgsql.Literal(old)))


def _wait_for_reload(connection: psycopg.Connection, loaded_before, timeout_s: float = 5.0) -> None:
    """Wait until this connection's backend has re-read the configuration (a reload is asynchronous)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if db.one(connection, query("conf_load_time")) != loaded_before:
            return
        time.sleep(0.02)


_LABS: dict[str, Lab] = {}
_CURRENT: list[Lab] = []


def current_lab() -> Lab | None:
    """The lab this kernel started last (what ``%%sql`` and ``%%pgbench`` use)."""
    return _CURRENT[-1] if _CURRENT else None


def start(notebook: str | None = None, *, profile: str | None = None, fresh: bool = False,
          extensions: tuple[str, ...] = EXTENSIONS) -> Lab:
    """Start (or reuse) the lab server and give this notebook its own database.

    notebook: names the database (``lab_<notebook>``) and the run records; default: the
        notebook's file name when JupyterLab tells it, else "scratch".
    profile: ci, laptop or article (default: LABKIT_PROFILE, else ci on Binder, else laptop).
    fresh: drop the notebook's database first (its tables are lost).
    """
    from .limits import raise_file_limit

    if "IPython" in sys.modules:  # in a kernel: %%sql and %%pgbench, registered once, and one-line errors
        from .magics import register_once  # before the server starts: a start that fails is one line too

        register_once()
    chosen = Profile.named(profile) if profile else current()
    notebook = notebook or _notebook_name()
    server = server_for_backend()
    messages: list[str] = []
    if not profile and default_name()[1] == "Binder":
        messages.append("On Binder: the small 'ci' profile (about one CPU here). For another, set "
                        "os.environ['LABKIT_PROFILE'] or pass profile= to labkit.start().")
    raise_file_limit()
    server.register_kernel()
    atexit.register(server.unregister_kernel)
    killed = server.reap_orphans()
    if killed:
        messages.append(f"Stopped {len(killed)} pgbench process(es) left by a kernel that died.")
    if server.start(chosen):
        messages.append(f"Started the {server.kind} PostgreSQL server.")
        if server.kind == "embedded":  # an external server's OS is told by _external_report
            messages += platform_messages(system_of(sys.platform))
    else:
        behind = _below_profile(server, chosen)
        if behind:  # the server was started for a smaller profile (another notebook's): apply it, or say so
            messages.append(_apply_profile(server, chosen, behind))
            print(messages[-1])  # the settings every run of this notebook has: said in the cell, not only in lab
    exists = _create_database(server, database_name(notebook), chosen, fresh, messages)
    messages += _profile_advice(chosen)
    lab = Lab(server, notebook, chosen, messages=messages)
    if not exists:
        _create_extensions(lab, extensions)
    previous = _LABS.pop(notebook, None)
    if previous is not None:
        previous.close()
        if previous in _CURRENT:
            _CURRENT.remove(previous)
    _LABS[notebook] = lab
    _CURRENT.append(lab)
    atexit.register(lab.close)
    from .live import in_notebook

    if in_notebook():
        # plotly loads its notebook renderers (and nbformat with them) on the first chart shown:
        # 2-3 s that would otherwise delay the first run's live chart. Pay it here, once; and
        # let the page load plotly.js for the live charts now, while nothing runs.
        import plotly.io._renderers  # noqa: F401

        from .livewidget import plotly_in_page

        plotly_in_page()
    return lab


def _below_profile(server: Server, profile: Profile) -> list[tuple[str, str, str]]:
    """The sized settings (max_connections, shared_buffers) of a running lab server below what ``profile`` asks.

    Only a server labkit can restart is compared: an external server's settings are reported by
    ``_external_report``. Each item: the setting, its value now, the profile's.
    """
    if not server.can_restart:
        return []
    wanted = {name: value for name, value in lab_settings(profile).items()
              if name in ("max_connections", "shared_buffers")}
    with _admin_connection(server) as connection:
        rows = connection.execute(query("settings_of"), {"names": list(wanted)}).fetchall()
    behind = []
    for name, setting, unit in rows:
        have, asked = _size(setting, unit), _size(wanted[name])
        if have is not None and asked is not None and have < asked:
            behind.append((name, units.shown(setting, unit), wanted[name]))
    return behind


def _apply_profile(server: Server, profile: Profile, behind: list[tuple[str, str, str]]) -> str:
    """Raise the sized settings to ``profile``'s with a restart when no other notebook uses the server; what was done.

    Where another notebook uses it, a restart would cut its sessions and maybe a run: say so, with
    the fix, and leave it.
    """
    have = "; ".join(f"{name} {now}, {profile.name} asks {value}" for name, now, value in behind)
    others = server.other_kernels()
    busy = [entry for entry in (server.pgbench_registry().live_entries() if server.pgbench_registry() else [])
            if entry.get("pid")]
    if others or busy:
        wanted = ", ".join(f"{name}={value!r}" for name, _, value in behind)
        return (f"The server runs with smaller settings than the {profile.name!r} profile's ({have}): another notebook "
                f"uses it, so they were not changed; lab.set({wanted}) applies them, with a restart (other notebooks' "
                "sessions reconnect; do it while no run is going).")
    names = [name for name, _, _ in behind]
    with db.connect(server.admin_conninfo()) as connection:
        before: dict[str, str | None] = dict(connection.execute(query("altered_settings"), {"names": names}).fetchall())
        for name, _, value in behind:
            connection.execute(pgsql.SQL("alter system set {} = {}").format(pgsql.Identifier(name),
                                                                            pgsql.Literal(value)))
    try:
        server.restart()
    except ServerStartFailed as failure:
        # left in ALTER SYSTEM's file, the profile's values would keep the server from starting ever after
        if not server.undo_settings({name: before.get(name) for name in names}):  # raises if even that will not start
            raise
        log.warning("the %s profile's %s: refused by the server (%s), put back", profile.name, have,
                    failure.reason or failure.short)
        return (f"The server would not start with the {profile.name!r} profile's settings ({have}): "
                f"{failure.reason or failure.short}. labkit put them back and started it again: this machine may be "
                "too small for that profile; choose a smaller one.")
    log.info("applied the %s profile's %s with a restart", profile.name, have)
    return (f"Applied the {profile.name!r} profile's settings ({have}) with a restart: no other notebook was using "
            "the server.")


def _size(text: str, unit: str | None = None) -> float | None:
    """A setting's size: bytes for memory, the number itself for a count (max_connections).

    >>> _size("16384", "8kB"), _size("300"), _size("on")
    (134217728.0, 300.0, None)
    """
    found = units.quantity(text, unit)
    if found is not None:
        return found[1]
    return float(text) if text.isdigit() else None


def _admin_connection(server: Server):
    """A connection to the server's maintenance database; ServerGone, in one line, where it cannot be made."""
    try:
        return db.connect(server.admin_conninfo())
    except psycopg.OperationalError as error:
        where = "LABKIT_DSN" if server.kind == "external" else f"the {server.kind} lab server"
        raise ServerGone(f"Could not connect to {where}: {connection_problem(error)}") from None


def _create_database(server: Server, database: str, profile: Profile, fresh: bool, messages: list[str]) -> bool:
    """Create the notebook's database unless it exists (dropping it first when ``fresh``); True if it existed."""
    with _admin_connection(server) as connection:
        if server.kind == "external":
            messages += _external_report(connection, profile)
        if fresh:
            connection.execute(pgsql.SQL("drop database if exists {} with (force)").format(pgsql.Identifier(database)))
        exists = db.one(connection, query("database_exists"), {"name": database})
        if not exists:
            try:
                connection.execute(pgsql.SQL("create database {}").format(pgsql.Identifier(database)))
            except psycopg.Error as error:
                raise LabkitError(f"Could not create the database {database}: {db.message(error)}") from None
            messages.append(f"Created the database {database}.")
    return exists


def _profile_advice(profile: Profile) -> list[str]:
    """What to say at start when the profile asks more than this machine gives."""
    from .limits import problems
    from .profiles import advise, fitting, machine_size

    advice = []
    if profile.name != "ci":
        cores, memory = machine_size()
        if fitting(cores, memory) == "ci":
            advice.append(f"{advise(cores, memory)} (now: {profile.name})")
    return advice + problems(profile)


def _create_extensions(lab: Lab, names) -> None:
    with lab.connect() as connection:
        for name in names:
            try:
                connection.execute(pgsql.SQL("create extension if not exists {}").format(pgsql.Identifier(name)))
            except psycopg.Error as error:
                lab.messages.append(f"Extension {name} is not available: {db.message(error)}")


def _external_report(connection, profile: Profile) -> list[str]:
    """Which lab settings an external server lacks (labkit changes nothing there).

    What a lab server should have depends on the OS the server runs on, not this one's.
    """
    system = system_of_version(db.one(connection, "select version()"))
    wanted = lab_settings(profile, system)
    rows = connection.execute(query("settings_of"), {"names": list(wanted)}).fetchall()
    have = {name: (setting, unit) for name, setting, unit in rows}
    differing = []
    for name, value in wanted.items():
        setting, unit = have.get(name, (None, None))
        if setting is None or not units.same(setting, unit, value):
            differing.append(f"{name}={value} (server: {setting}{unit or ''})")
    if not differing:
        return ["Using the server from LABKIT_DSN; it has the lab settings."]
    return ["Using the server from LABKIT_DSN; labkit did not apply these lab settings: " + "; ".join(differing)]
