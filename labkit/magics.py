"""``%%sql`` and ``%%pgbench``: thin shells over the notebook's current :class:`labkit.lab.Lab`.

    %%sql --session T2
    update tbl set cnt = cnt - 1 where id = 1;   -- blocks while T1 holds the row

    %%pgbench -c {clients} -T 10 --name plain
    update tbl set cnt = cnt - 1 where id = 1;

Registered once per kernel (``%load_ext labkit``, or the first ``labkit.start()``); each cell
uses the lab that ``labkit.start()`` returned last. A labkit error becomes one short line (an
IPython UsageError), never a traceback; a database error is printed as the server wrote it,
because it is often the lesson.
"""

from __future__ import annotations

import sys
from typing import Any

import psycopg
from IPython import get_ipython
from IPython.core.error import UsageError as IPythonUsageError
from IPython.core.magic import Magics, cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import display

from . import pgbench, units
from .errors import LabkitError, UsageError, connection_problem
from .probes import WAIT_EVENTS, Probe
from .sessions import Failed, Result, Waiting

# With --lock-timeout up to this long, the cell waits for the timeout instead of returning early.
MAX_CELL_WAIT_S = 30
# Options of %%pgbench that are labkit's, not pgbench's.
_LABKIT_OPTIONS = ("--probes", "--work", "--setup", "--after", "--repeat")
_LABKIT_FLAGS = ("--no-waits", "--hold-sessions", "--arm")


def _print_result(outcome, *, label: bool) -> None:
    if outcome.note:
        print(outcome.note)
    if isinstance(outcome, Waiting):
        print(outcome.message())
    elif isinstance(outcome, Failed):
        print(outcome.message() if label else outcome.error, file=sys.stderr)
    elif isinstance(outcome, Result):
        prefix = f"{outcome.session}: " if label else ""
        for frame in outcome.frames[:-1]:
            display(frame)
        if outcome.frame is None or label:
            print(prefix + outcome.message() + (f" ({outcome.elapsed_s:.1f} s)" if outcome.elapsed_s >= 1 else ""))


def _for_student(error: LabkitError) -> IPythonUsageError:
    """A labkit error as one short block without a traceback (the detail, e.g. a log's tail, below it)."""
    return IPythonUsageError(str(error))


def _current_lab():
    from .lab import current_lab

    lab = current_lab()
    if lab is None:
        raise IPythonUsageError("No lab yet in this notebook: run `lab = labkit.start()` first.")
    return lab


def split_labkit_options(argv: list[str]) -> tuple[list[str], dict[str, list[str]], set[str]]:
    """Take labkit's own options out of a %%pgbench line: (pgbench's words, {option: values}, flags).

    >>> words, options, flags = split_labkit_options(["-c", "4", "--probes", "a,b", "--work=done", "--no-waits"])
    >>> words, options, sorted(flags)
    (['-c', '4'], {'--probes': ['a,b'], '--work': ['done']}, ['--no-waits'])
    """
    kept: list[str] = []
    found: dict[str, list[str]] = {name: [] for name in _LABKIT_OPTIONS}
    flags: set[str] = set()
    words = iter(argv)
    for word in words:
        option, _, inline = word.partition("=")
        if word in _LABKIT_FLAGS:
            flags.add(word)
        elif option in _LABKIT_OPTIONS:
            found[option].append(inline if inline else next(words, ""))
        else:
            kept.append(word)
    return kept, {name: values for name, values in found.items() if values}, flags


class _StepsWatch:
    """A %%steps cell's live output: each permutation's lines as they are printed, and its lanes redrawn."""

    def __init__(self, lab, *, show_lanes: bool):
        from .live import in_notebook

        self.show_lanes = show_lanes and in_notebook()
        self.views: dict[int, Any] = {}  # a FigureView per permutation
        self.printed: dict[int, int] = {}

    def event(self, run) -> None:
        key = id(run)
        if self.show_lanes:  # the lanes first, above the permutation's text: both grow as it runs
            from .charts import lanes
            from .live import FigureView

            view = self.views.get(key)
            if view is None:
                self.views[key] = FigureView(run.name, lanes(run))
            else:
                view.show(lanes(run))
        lines = run.lines[self.printed.get(key, 0):]
        self.printed[key] = len(run.lines)
        print("".join(lines), end="", flush=True)

    def done(self, outcome) -> None:
        from .charts import lanes

        for run in outcome.permutations:
            self.event(run)  # what is left to print (the teardown's tables)
            if self.show_lanes:
                self.views[id(run)].final(lanes(run))
        for note in outcome.notes:
            print(f"({note})")


def _repeats(values: list[str] | None) -> int | None:
    """``--repeat N`` as a number of runs (None without it).

    >>> _repeats(["3"]), _repeats(None)
    (3, None)
    >>> _repeats(["x"])
    Traceback (most recent call last):
    ...
    labkit.errors.UsageError: --repeat x: give a whole number of runs, 1 or more (e.g. --repeat 3).
    """
    if not values:
        return None
    word = values[-1]
    if not word.isdigit() or int(word) < 1:
        raise UsageError(f"--repeat {word}: give a whole number of runs, 1 or more (e.g. --repeat 3).")
    return int(word)


@magics_class
class LabMagics(Magics):
    def _namespace(self) -> dict:
        """The notebook's variables (the magics are only registered in a running IPython)."""
        if self.shell is None:
            raise LabkitError("The labkit magics need IPython.")
        return self.shell.user_ns

    @magic_arguments()
    @argument("--session", "-s", default="main", help="the named session (own connection and transaction)")
    @argument("--out", "-o", default=None, help="store the result table in this variable")
    @argument("--lock-timeout", default=None, help="e.g. 2s: how long a statement may wait for a lock")
    @argument("--statement-timeout", default=None, help="e.g. 30s: how long a statement may run")
    @cell_magic
    def sql(self, line, cell):
        """Run the cell's SQL in the lab database (in a named session with --session).

        --lock-timeout and --statement-timeout hold for this cell's statements only.
        """
        from .lab import server_gone

        args = parse_argstring(self.sql, line)
        lab = _current_lab()
        timeouts = {k: v for k, v in (("lock_timeout", args.lock_timeout),
                                      ("statement_timeout", args.statement_timeout)) if v}
        try:
            session = lab.session(args.session)
            # A short lock timeout given in the cell is the lesson: wait for it rather than return early.
            limit = units.seconds(args.lock_timeout) if args.lock_timeout else None
            if limit is not None and 0 < limit <= MAX_CELL_WAIT_S:
                outcome = session.run(cell, report_wait_after=limit + 1.0, timeouts=timeouts)
            else:
                outcome = session.run(cell, timeouts=timeouts)
        except LabkitError as error:
            raise _for_student(error) from None
        except psycopg.OperationalError as error:  # connecting the session (again) failed
            raise _for_student(server_gone(lab, error) or LabkitError(
                f"{args.session} could not connect: {connection_problem(error)}")) from None
        gone = server_gone(lab, outcome.exception) if isinstance(outcome, Failed) and outcome.exception else None
        if gone is not None:
            raise _for_student(gone) from None
        named = args.session != "main"
        _print_result(outcome, label=named)
        for other in lab.sessions.finished_elsewhere(args.session):
            print(f"Meanwhile {other.session}'s waiting statement finished:")
            _print_result(other, label=True)
            if isinstance(other, Result) and other.frame is not None:
                display(other.frame)
        if isinstance(outcome, Result) and outcome.frame is not None:
            if args.out:
                self._namespace()[args.out] = outcome.frame
            return outcome.frame
        return None

    @cell_magic
    def pgbench(self, line, cell):
        """Run the cell as a pgbench script: pgbench options plus labkit's own.

        --name NAME: the run's name. --probes a,b: probes (variables) sampled during the run.
        --work VAR: VAR holds SQL returning the work done so far (one number); the run then
        records goodput beside tps and the live chart draws it. --no-waits: no wait-event probe.
        --hold-sessions: run even while a session of this notebook is idle in a transaction.
        --setup VAR: VAR holds SQL run just before pgbench starts (e.g. refilling a queue), so the
        cell can be run again alone; or a function called as VAR(lab) (e.g. a rebuild with VACUUM,
        which one SQL string cannot hold). --after VAR: a function called as VAR(run) once each run
        is recorded (e.g. to note a check in it). --repeat N: run it N times (the setup before each,
        the after after each), kept together in the records so that comparisons show their spread.
        --arm: define the cell as an arm of an experiment instead of running it now:
        ``lab.experiment(["name-a", "name-b"])`` then runs the arms interleaved (A B, B A, ...).
        """
        lab = _current_lab()
        try:
            words, chosen, flags = split_labkit_options(pgbench.split_options(line))
            probes = [] if "--no-waits" in flags else [WAIT_EVENTS]
            probes += [self._probe(name) for value in chosen.get("--probes", []) for name in value.split(",") if name]
            work = self._sql_variable("--work", chosen, "counting the work done", "select count(*) from done")
            setup = self._sql_variable("--setup", chosen, "to run before pgbench", "call refill(1000)",
                                       functions=True)
            after = self._function("--after", chosen, "run", "lambda run: lab.check('select count(*) as n from t', run)")
            spec = pgbench.parse_options(words, script=cell, defaults=lab.profile.run_defaults())
            if "--arm" in flags:
                return self._arm(lab, spec, chosen, probes=probes, work=work, setup=setup,
                                 hold_sessions="--hold-sessions" in flags)
            return lab.repeat_spec(spec, _repeats(chosen.get("--repeat")), probes=probes, work=work,
                                   hold_sessions="--hold-sessions" in flags, setup=setup, after=after)
        except LabkitError as error:
            raise _for_student(error) from None

    @staticmethod
    def _arm(lab, spec, chosen: dict, **options) -> None:
        """Keep a %%pgbench cell as an arm of an experiment (run later by lab.experiment, interleaved)."""
        from .experiment import Arm

        if spec.name == "run":
            raise UsageError("--arm needs the arm's name: add --name NAME to the cell.")
        if "--repeat" in chosen or "--after" in chosen:
            raise UsageError("--arm defines an arm; give repeats and after= to lab.experiment, which runs the arms.")
        setup = options.pop("setup")
        lab.arms[spec.name] = Arm(spec.name, spec=spec, setup=setup, options=options)
        others = [name for name in lab.arms if name != spec.name]
        print(f"Arm {spec.name!r} defined (not run yet): lab.experiment({[*others, spec.name]!r}) runs "
              + ("it with the others" if others else "it with the arms you define next") + ", interleaved.")

    @magic_arguments()
    @argument("--permutation", "-p", default=None, help='one permutation, e.g. "s1u s2u s1c" (default: the spec\'s)')
    @argument("--out", "-o", default=None, help="store the outcome (text, events, lanes) in this variable")
    @argument("--timeout", default=None, type=float, help="seconds a step may run before it is cancelled (30)")
    @argument("--no-lanes", action="store_true", help="the text only, no lanes")
    @argument("--regress", default=None, metavar="SPEC",
              help="pg_regress's settings and application names, for the suite's spec SPEC (its expected output)")
    @cell_magic
    def steps(self, line, cell):
        """Run the cell, an isolation spec (setup, sessions with steps, permutations), step by step.

        Each step goes to its session (the lab's session of that name); a step the server makes wait
        is shown ``<waiting ...>`` and completed when a later step releases it. The lanes are drawn
        as it happens, one lane per session. The text is the isolation tester's, stderr included.
        """
        from . import interleave
        from .lab import server_gone

        args = parse_argstring(self.steps, line)
        lab = _current_lab()
        try:
            spec = interleave.parse(cell)
            environment = interleave.regress(args.regress) if args.regress else None
            print(interleave.header(spec), end="", flush=True)
            watch = _StepsWatch(lab, show_lanes=not args.no_lanes)
            permutation = args.permutation.strip("'\"") if args.permutation else None  # IPython keeps the quotes
            outcome = interleave.run(lab, spec, permutation=permutation, on_event=watch.event, environment=environment,
                                     step_timeout_s=args.timeout or interleave.DEFAULT_STEP_TIMEOUT_S)
            watch.done(outcome)
        except LabkitError as error:
            raise _for_student(error) from None
        except KeyboardInterrupt:
            raise IPythonUsageError("Interrupted: the steps still running were cancelled, the sessions' transactions "
                                    "rolled back and the teardowns run; the sessions are ready for the next cell.") from None
        except psycopg.OperationalError as error:  # connecting the sessions failed
            raise _for_student(server_gone(lab, error) or LabkitError(
                f"The spec's sessions could not connect: {connection_problem(error)}")) from None
        if args.out:
            self._namespace()[args.out] = outcome
        return None

    def _sql_variable(self, option: str, chosen: dict, purpose: str, example: str, *, functions: bool = False):
        """The SQL held by the variable an option names (``--work done``), or None without the option.

        With ``functions``, the variable may also hold a function (called with the lab).
        """
        if option not in chosen:
            return None
        name = chosen[option][-1]
        value = self._namespace().get(name)
        if functions and callable(value):
            return value
        if not isinstance(value, str) or not value.strip():
            raise IPythonUsageError(f"{option} {name}: define it first as SQL {purpose}, e.g. {name} = '{example}'"
                                    + (f", or as a function of the lab: def {name}(lab): ..." if functions else ""))
        return value

    def _function(self, option: str, chosen: dict, argument: str, example: str):
        """The function the variable an option names holds, or None without the option."""
        if option not in chosen:
            return None
        name = chosen[option][-1]
        value = self._namespace().get(name)
        if not callable(value):
            raise IPythonUsageError(f"{option} {name}: define it first as a function of the {argument}, e.g. "
                                    f"{name} = {example}")
        return value

    def _probe(self, name: str) -> Probe:
        value = self._namespace().get(name)
        if not isinstance(value, Probe):
            raise IPythonUsageError(f"--probes {name}: define it first, e.g. "
                                    f"{name} = labkit.probe('{name}', 'select ...')")
        return value


def register_once(shell=None) -> None:
    """Register %%sql and %%pgbench in this kernel unless they are already there."""
    shell = shell or get_ipython()
    if shell is None:
        return
    if any(isinstance(instance, LabMagics) for instance in shell.magics_manager.registry.values()):
        return
    shell.register_magics(LabMagics)


def load_ipython_extension(shell) -> None:
    """``%load_ext labkit``: the magics (``lab = labkit.start()`` then gives them a lab)."""
    register_once(shell)
