"""``%%sql`` and ``%%pgbench``: thin shells over :class:`labkit.lab.Lab`.

    %%sql --session T2
    update tbl set cnt = cnt - 1 where id = 1;   -- blocks while T1 holds the row

    %%pgbench -c {clients} -T 10 --name plain
    update tbl set cnt = cnt - 1 where id = 1;

Students get one short line for a mistake (an IPython UsageError), never a traceback.
Database errors are printed as the server wrote them: they are often the lesson.
"""

from __future__ import annotations

import shlex
import sys

from IPython.core.error import UsageError as IPythonUsageError
from IPython.core.magic import Magics, cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import display

from . import pgbench
from .errors import LabkitError
from .probes import WAIT_EVENTS, Probe
from .sessions import Failed, Result, Waiting, duration_s

# With --lock-timeout up to this long, the cell waits for the timeout instead of returning early.
MAX_CELL_WAIT_S = 30


def _print_outcome(outcome, *, label: bool) -> None:
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


@magics_class
class LabMagics(Magics):
    def __init__(self, shell, lab):
        super().__init__(shell)
        self.lab = lab

    @magic_arguments()
    @argument("--session", "-s", default="main", help="the named session (own connection and transaction)")
    @argument("--out", "-o", default=None, help="store the result table in this variable")
    @argument("--lock-timeout", default=None, help="e.g. 2s: how long a statement may wait for a lock")
    @argument("--statement-timeout", default=None, help="e.g. 30s: how long a statement may run")
    @cell_magic
    def sql(self, line, cell):
        """Run the cell's SQL in the lab database (in a named session with --session)."""
        args = parse_argstring(self.sql, line)
        timeouts = {k: v for k, v in (("lock_timeout", args.lock_timeout),
                                      ("statement_timeout", args.statement_timeout)) if v}
        try:
            session = self.lab.session(args.session, **timeouts)
            # A short lock timeout given in the cell is the lesson: wait for it rather than return early.
            limit = duration_s(args.lock_timeout) if args.lock_timeout else None
            if limit is not None and 0 < limit <= MAX_CELL_WAIT_S:
                outcome = session.run(cell, report_wait_after=limit + 1.0)
            else:
                outcome = session.run(cell)
        except LabkitError as error:
            raise IPythonUsageError(error.short) from None
        named = args.session != "main"
        _print_outcome(outcome, label=named)
        for other in self.lab.sessions.finished_elsewhere(args.session):
            print(f"Meanwhile {other.session}'s waiting statement finished:")
            _print_outcome(other, label=True)
            if isinstance(other, Result) and other.frame is not None:
                display(other.frame)
        if isinstance(outcome, Result) and outcome.frame is not None:
            if args.out:
                self.shell.user_ns[args.out] = outcome.frame
            return outcome.frame
        return None

    @cell_magic
    def pgbench(self, line, cell):
        """Run the cell as a pgbench script: pgbench options plus --name, --probes a,b, --work VAR and --no-waits.

        --work VAR: VAR holds SQL returning the work done so far (one number); the run then
        records goodput beside tps and the live chart draws it.
        """
        argv = shlex.split(line)
        probes: list[Probe] = [WAIT_EVENTS]
        work = None
        kept = []
        index = 0
        while index < len(argv):
            token = argv[index]
            option = token.split("=", 1)[0]
            if token == "--no-waits":
                probes = [p for p in probes if p is not WAIT_EVENTS]
            elif option in ("--probes", "--work"):
                if "=" in token:
                    value = token.split("=", 1)[1]
                else:
                    index += 1
                    value = argv[index] if index < len(argv) else ""
                if option == "--probes":
                    probes += [self._probe(name) for name in value.split(",") if name]
                else:
                    work = self._work(value)
            else:
                kept.append(token)
            index += 1
        try:
            spec = pgbench.parse_options(kept, script=cell)
            return self.lab.run(spec, probes=probes, work=work)
        except LabkitError as error:
            raise IPythonUsageError(str(error)) from None

    def _work(self, name: str) -> str:
        value = self.shell.user_ns.get(name)
        if not isinstance(value, str) or not value.strip():
            raise IPythonUsageError(f"--work {name}: define it first as SQL counting the work done, "
                                    f"e.g. {name} = 'select count(*) from done'")
        return value

    def _probe(self, name: str) -> Probe:
        value = self.shell.user_ns.get(name)
        if not isinstance(value, Probe):
            raise IPythonUsageError(f"--probes {name}: define it first, e.g. {name} = labkit.probe('{name}', 'select ...')")
        return value


def register(shell, lab) -> None:
    """Make %%sql and %%pgbench talk to ``lab`` (the latest labkit.start() wins)."""
    shell.register_magics(LabMagics(shell, lab))


def load_ipython_extension(shell) -> None:
    """``%load_ext labkit``: start the lab and register the magics."""
    from .lab import start

    register(shell, start())
