"""Interleavings as data: PostgreSQL's isolation-tester specs, run step by step through labkit's sessions.

A spec is the isolation tester's own format (``src/test/isolation/README`` at REL_18): ``setup``
and ``teardown`` blocks, ``session`` blocks with their own ``setup``, ``step``s and ``teardown``,
and ``permutation`` lines whose steps may carry blocker markers (``s1a(s2b)``, ``s1a(*)``,
``s1a(s2b notices 1)``). :func:`parse` reads it (pure); :func:`run` runs one permutation, or
all of them, the way ``isolationtester.c`` does: each step is sent to its session's own
connection; a step that the server makes wait for a lock (``pg_isolation_test_session_is_blocked``,
as the isolation tester asks it) is reported ``<waiting ...>`` and the next step goes on; its
completion is reported when a later step releases it. The output is the isolation tester's
own text, stdout and stderr together as pg_regress keeps them: result tables as PQprint writes
them, notices as libpq formats them for a notice processor, NOTIFY messages after the step that
received them, ``unused step name:`` lines, a step whose backend dies (FATAL, then libpq's own
lines), failed teardowns (``teardown of session s1 failed: ...``), and, where the tester exits
(a failed setup, a step that cannot be sent, mutually blocking steps), its last line; labkit then
ends what still runs, rolls back and runs the teardowns, and says so in ``Outcome.notes``.

Each step is also an :class:`Event` with its times and, when it waited, the lock it waited for
(from ``pg_locks``, read at the moment it was seen waiting) and who held it, so that
:func:`labkit.charts.lanes` can draw the interleaving as one lane per session.

One protocol layer, and why this one. Every connection is used by one thread at a time, under
psycopg's own ``Connection.lock``: a session's in the thread that session runs its statement in
(``Session.start``), the control connection (setups, teardowns, the lock-wait question) in the
caller's. A step is psycopg's ``generators.send`` and then :func:`_protocol`, a generator of the
tester's own libpq calls (``PQisBusy``/``PQconsumeInput`` until the first result, ``PQgetResult``
until NULL, then ``PQnotifies``) that never waits; psycopg's ``waiting.wait`` waits for it,
waking every 10 ms to send a cancel the coordinator asked for. The coordinator (the caller's
thread) only reads what a step has received and asks, through events, for a cancel, for the
step's completion or for its end; it never touches a session's connection. psycopg's async API
would need every session on an ``AsyncConnection`` and an event loop beside the notebook's own,
while ``%%sql`` uses the same sessions synchronously: the generators are the layer both share.
A session never connects again inside a run: the tester's pids, taken once, stay true, and a
backend that was ended is reported as the tester reports it (the next ``%%sql`` connects again).

Where the output differs from the isolation tester's, and what removes each difference (a run
with ``environment=regress(spec_name)``, ``%%steps --regress SPEC``, removes the first five;
``tests/benchmarks/isolation_conformance.py`` finds which one a spec of the suite needs):

- DateStyle and TimeZone: pg_regress sets ``PGDATESTYLE=Postgres, MDY`` and
  ``PGTZ=America/Los_Angeles``; this server's are ``ISO, MDY`` and its own zone.
- IntervalStyle: pg_regress's ``PGOPTIONS`` sets ``postgres_verbose``.
- The query id: the lab server loads ``pg_stat_statements``, so ``EXPLAIN VERBOSE`` adds a
  ``Query Identifier:`` line; ``compute_query_id=regress`` keeps it computed and hides it.
- application_name: pg_regress's sessions are ``isolation/<spec>/<session>``; labkit's are
  ``labkit-<session>``, which labkit's own filters read (``regress`` sets them as pg_regress's;
  the settings are made with ``set_config`` after connecting, so a spec's ``RESET ALL`` would go
  back to the server's values where pg_regress's go back to its own).
- The database: pg_regress runs the suite in ``isolation_regression`` (``lc_*`` C, ``bytea_output``
  hex); a spec that names it needs a lab on a database of that name.
- The server: ``max_prepared_transactions`` (0 on the lab server: ``lab.set`` it for the suite's
  prepared-transaction specs) and any setting a spec's output shows.
- The tester cancels a step after ``2 * PG_TEST_TIMEOUT_DEFAULT`` (360 s by default) and gives
  up after twice that; here both are ``step_timeout_s`` (30 s by default: a notebook must not
  hang), and a setup or teardown block, which the tester waits for without end, is cancelled
  after it too.
- labkit's sessions carry ``lock_timeout``, ``statement_timeout`` and
  ``idle_in_transaction_session_timeout`` (minutes long); the tester's have the server's.
"""

from __future__ import annotations

import functools
import itertools
import logging
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Generator
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .errors import UsageError
from .queries import query

if TYPE_CHECKING:
    from psycopg.waiting import Ready, Wait

log = logging.getLogger(__name__)

KEYWORDS = ("notices", "permutation", "session", "setup", "step", "teardown")
DEFAULT_STEP_TIMEOUT_S = 30.0
POLL_S = 0.01  # the isolation tester checks for lock waits every 10 ms


# ----------------------------------------------------------------------------- the spec


@dataclass(frozen=True)
class Step:
    name: str
    sql: str
    session: str


@dataclass(frozen=True)
class SessionSpec:
    name: str
    steps: tuple[Step, ...]
    setup: str | None = None
    teardown: str | None = None


@dataclass(frozen=True)
class Blocker:
    """A permutation step's blocking condition: ``*`` (waiting at once), another step, or its notices."""

    kind: str  # "once", "step" or "notices"
    step: str = ""  # the other step ("" for *)
    notices: int = 0


@dataclass(frozen=True)
class PermutationStep:
    name: str
    blockers: tuple[Blocker, ...] = ()

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class Spec:
    """An isolation spec: setup blocks, an optional teardown, sessions, and permutations (none: all of them)."""

    sessions: tuple[SessionSpec, ...]
    setup: tuple[str, ...] = ()
    teardown: str | None = None
    permutations: tuple[tuple[PermutationStep, ...], ...] = ()

    @property
    def steps(self) -> dict[str, Step]:
        return {step.name: step for session in self.sessions for step in session.steps}

    def all_permutations(self) -> list[tuple[PermutationStep, ...]]:
        """Every interleaving of the sessions' steps (each session's in order), in the isolation tester's order."""
        found: list[tuple[PermutationStep, ...]] = []

        def pick(taken: list[int], chosen: list[PermutationStep]) -> None:
            more = False
            for index, session in enumerate(self.sessions):
                if taken[index] < len(session.steps):
                    more = True
                    chosen.append(PermutationStep(session.steps[taken[index]].name))
                    taken[index] += 1
                    pick(taken, chosen)
                    taken[index] -= 1
                    chosen.pop()
            if not more:
                found.append(tuple(chosen))

        pick([0] * len(self.sessions), [])
        return found

    def to_run(self) -> list[tuple[PermutationStep, ...]]:
        return list(self.permutations) or self.all_permutations()

    @classmethod
    def build(cls, sessions: dict[str, dict | list | tuple], *, setup: str | list[str] | tuple[str, ...] = (),
              teardown: str | None = None, permutations: list[str] | tuple[str, ...] = ()) -> Spec:
        """The same spec in Python, for a notebook cell.

        ``sessions`` maps a session to its steps, ``{"s1": {"s1u": "update ...", "s1c": "commit"}}``,
        or to ``{"setup": "begin", "steps": {...}, "teardown": ...}``; each permutation is a line
        as in a spec file (``"s1u s2u s1c s2c"``, markers included).

        >>> spec = Spec.build({"s1": {"setup": "begin", "steps": {"s1u": "update t set n = 1"}}, "s2": {"s2u": "select 1"}},
        ...                   setup="create table t (n int)", permutations=["s1u s2u(*)"])
        >>> [s.name for s in spec.sessions], spec.sessions[0].setup, spec.permutations[0][1].blockers
        (['s1', 's2'], 'begin', (Blocker(kind='once', step='', notices=0),))
        """
        built = []
        for name, body in sessions.items():
            options = body if isinstance(body, dict) and "steps" in body else {"steps": body}
            steps = options["steps"]
            if not isinstance(steps, dict):
                raise UsageError(f"Session {name}: give its steps as {{'step name': 'SQL', ...}}.")
            setup_sql, teardown_sql = options.get("setup"), options.get("teardown")
            built.append(SessionSpec(name, tuple(Step(step, sql, name) for step, sql in steps.items()),
                                     None if setup_sql is None else str(setup_sql),
                                     None if teardown_sql is None else str(teardown_sql)))
        setups = (setup,) if isinstance(setup, str) else tuple(setup)
        parsed = [_permutation(_tokens(line)) for line in permutations]
        return check(cls(tuple(built), setups, teardown, tuple(parsed)))


_TOKEN = re.compile(r"""
    (?P<newline>\n) | (?P<space>[ \t\r\f]+) | (?P<comment>\#[^\n]*)
  | (?P<sql>\{[ \t\r\f]*(?P<body>[^}]*?)[ \t\r\f]*\})
  | (?P<quoted>"(?:[^"\n]|"")*")
  | (?P<word>[A-Za-z\x80-\U0010ffff_][A-Za-z\x80-\U0010ffff_0-9$]*)
  | (?P<number>[0-9]+) | (?P<self>[,()*])
""", re.VERBOSE)


def _tokens(text: str) -> list[tuple[str, str, int]]:
    """The spec's tokens as (kind, value, line), as ``specscanner.l`` reads them."""
    tokens = []
    position, line = 0, 1
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None:
            if text[position] == "{":
                raise UsageError(f"Line {line}: unterminated SQL block (a block cannot contain '}}').")
            if text[position] == '"':
                raise UsageError(f"Line {line}: unterminated quoted identifier.")
            raise UsageError(f"Line {line}: unexpected character {text[position]!r}.")
        kind = match.lastgroup or ""
        value = match.group(kind)
        if kind == "sql":
            tokens.append(("sql", match.group("body"), line))
        elif kind == "quoted":
            tokens.append(("identifier", value[1:-1].replace('""', '"'), line))
        elif kind == "word":
            tokens.append((value, value, line) if value in KEYWORDS else ("identifier", value, line))
        elif kind in ("number", "self"):
            tokens.append((kind if kind == "number" else value, value, line))
        line += value.count("\n")
        position = match.end()
    return tokens


def parse(text: str) -> Spec:
    """A spec in the isolation tester's format (``setup { ... } session s1 step s1a { ... } permutation ...``).

    >>> spec = parse('''
    ... setup { create table t (id int primary key, n int); insert into t values (1, 0); }
    ... teardown { drop table t; }
    ... session s1
    ... setup { begin; }
    ... step s1u { update t set n = n + 1 where id = 1; }
    ... step s1c { commit; }
    ... session s2
    ... step s2u { update t set n = n + 1 where id = 1; }
    ... permutation s1u s2u s1c
    ... permutation s1u s2u(*) s1c(s2u)
    ... ''')
    >>> [step.name for step in spec.sessions[0].steps], spec.setup, len(spec.to_run())
    (['s1u', 's1c'], ('create table t (id int primary key, n int); insert into t values (1, 0);',), 2)
    >>> [str(b.kind) for b in spec.permutations[1][2].blockers]
    ['step']
    """
    tokens = _tokens(text)
    position = 0

    def peek() -> str | None:
        return tokens[position][0] if position < len(tokens) else None

    def take(kind: str, what: str) -> str:
        nonlocal position
        if peek() != kind:
            found = tokens[position] if position < len(tokens) else ("end of spec", "", tokens[-1][2] if tokens else 1)
            raise UsageError(f"Line {found[2]}: expected {what}, found {found[1] or found[0]!r}.")
        position += 1
        return tokens[position - 1][1]

    setups = []
    while peek() == "setup":
        take("setup", "setup")
        setups.append(take("sql", "a { SQL } block after setup"))
    teardown = None
    if peek() == "teardown":
        take("teardown", "teardown")
        teardown = take("sql", "a { SQL } block after teardown")
    sessions = []
    while peek() == "session":
        take("session", "session")
        name = take("identifier", "a session name")
        session_setup = None
        if peek() == "setup":
            take("setup", "setup")
            session_setup = take("sql", "a { SQL } block after setup")
        steps = []
        while peek() == "step":
            take("step", "step")
            step = take("identifier", "a step name")
            steps.append(Step(step, take("sql", f"the {{ SQL }} of step {step}"), name))
        if not steps:
            take("step", f"at least one step in session {name}")
        session_teardown = None
        if peek() == "teardown":
            take("teardown", "teardown")
            session_teardown = take("sql", "a { SQL } block after teardown")
        sessions.append(SessionSpec(name, tuple(steps), session_setup, session_teardown))
    if not sessions:
        take("session", "at least one session")
    permutations = []
    while peek() == "permutation":
        take("permutation", "permutation")
        start = position
        while peek() in ("identifier", "(", ")", ",", "*", "notices", "number"):
            position += 1
        permutations.append(_permutation(tokens[start:position]))
    if position < len(tokens):
        kind, value, line = tokens[position]
        raise UsageError(f"Line {line}: unexpected {value or kind!r} (the order is setup, teardown, sessions, "
                         "permutations).")
    return check(Spec(tuple(sessions), tuple(setups), teardown, tuple(permutations)))


def _permutation(tokens: list[tuple[str, str, int]]) -> tuple[PermutationStep, ...]:
    """One permutation line's steps with their markers: ``s1a s2a(*) s1b(s2a, s3a notices 2)``."""
    steps: list[PermutationStep] = []
    queue = list(tokens)

    def next_token(expected: str) -> tuple[str, str, int]:
        if not queue:
            raise UsageError(f"A permutation ends where {expected} was expected.")
        return queue.pop(0)

    while queue:
        kind, name, line = next_token("a step name")
        if kind != "identifier":
            raise UsageError(f"Line {line}: a permutation lists step names, found {name!r}.")
        blockers: list[Blocker] = []
        if queue and queue[0][0] == "(":
            queue.pop(0)
            while True:
                kind, value, line = next_token("a marker")
                if kind == "*":
                    blockers.append(Blocker("once"))
                elif kind == "identifier" and queue and queue[0][0] == "notices":
                    queue.pop(0)
                    count = next_token("a number of notices")
                    if count[0] != "number":
                        raise UsageError(f"Line {line}: 'notices' takes a number.")
                    blockers.append(Blocker("notices", value, int(count[1])))
                elif kind == "identifier":
                    blockers.append(Blocker("step", value))
                else:
                    raise UsageError(f"Line {line}: a marker is *, a step name, or a step name with notices N.")
                kind, value, line = next_token("',' or ')'")
                if kind == ")":
                    break
                if kind != ",":
                    raise UsageError(f"Line {line}: markers are separated by commas and closed by ')'.")
        steps.append(PermutationStep(name, tuple(blockers)))
    if not steps:
        raise UsageError("A permutation needs at least one step.")
    return tuple(steps)


def check(spec: Spec) -> Spec:
    """The isolation tester's checks (``check_testspec``): unique steps, known steps and blockers."""
    seen: dict[str, str] = {}
    for session in spec.sessions:
        for step in session.steps:
            if step.name in seen:
                raise UsageError(f"Duplicate step name: {step.name} (step names are unique across the spec).")
            seen[step.name] = session.name
    names = [session.name for session in spec.sessions]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise UsageError(f"Duplicate session name: {', '.join(twice)}.")
    for permutation in spec.permutations:
        in_permutation = {entry.name for entry in permutation}
        for entry in permutation:
            if entry.name not in seen:
                raise UsageError(f'Undefined step "{entry.name}" specified in permutation.')
            for blocker in entry.blockers:
                if blocker.kind == "once":
                    continue
                if blocker.step not in in_permutation:
                    raise UsageError(f'Undefined blocking step "{blocker.step}" referenced in permutation step '
                                     f'"{entry.name}".')
                if seen[blocker.step] == seen[entry.name]:
                    raise UsageError(f'Permutation step "{entry.name}" cannot block on its own session.')
    return spec


def unused_steps(spec: Spec) -> list[str]:
    """Steps no permutation uses (the isolation tester warns of them)."""
    if not spec.permutations:
        return []
    used = {step.name for permutation in spec.permutations for step in permutation}
    return [name for name in spec.steps if name not in used]


# ----------------------------------------------------------------------------- result tables


def format_table(names: list[str], rows: list[list[str | None]]) -> str:
    """A result as libpq's ``PQprint`` writes it for the isolation tester (header, aligned, ``|``, row count).

    A column is right-aligned when every non-empty value looks like a number; widths are counted
    in bytes, as libpq counts them.

    >>> print(format_table(["id", "data"], [["1", "2"]]), end="")
    id|data
    --+----
     1|   2
    (1 row)
    <BLANKLINE>
    >>> format_table(["ok"], [["t"], [None]]).splitlines()
    ['ok', '--', 't ', '  ', '(2 rows)', '']
    """
    count = len(names)
    if not count:
        return ""  # PQprint prints nothing of a result without columns
    numeric = [True] * count
    widths = [0] * count
    for row in rows:
        for j, value in enumerate(row):
            if not value:
                continue  # empty and NULL values are skipped by PQprint's alignment test
            if numeric[j] and not _numeric(value):
                numeric[j] = False
            widths[j] = max(widths[j], len(value.encode()))
    for j, name in enumerate(names):
        widths[j] = max(widths[j], len(name.encode()))

    def cell(value: str, j: int) -> str:
        pad = " " * (widths[j] - len(value.encode()))
        return pad + value if numeric[j] else value + pad

    lines = ["|".join(cell(name, j) for j, name in enumerate(names)),
             "+".join("-" * width for width in widths)]
    lines += ["|".join(cell(value or "", j) for j, value in enumerate(row)) for row in rows]
    lines.append(f"({len(rows)} row{'' if len(rows) == 1 else 's'})")
    return "\n".join(lines) + "\n\n"


def _numeric(value: str) -> bool:
    """PQprint's test: only digits, '.', 'e', 'E', ' ' and '-', not starting with e/E, ending with a digit."""
    if value[0] in "eE" or value[-1] not in "0123456789":
        return False
    return all(ch in "0123456789.eE -" for ch in value)


# ----------------------------------------------------------------------------- the environment


@dataclass(frozen=True)
class Environment:
    """Settings every connection of a run is given first, and application names as pg_regress's.

    ``application_name``: each connection's name becomes it, ``/`` and the session's name (``control
    connection`` for the tester's own), as the isolation tester appends its own to pg_regress's
    ``PGAPPNAME``; None keeps labkit's names (``labkit-s1``, which labkit's own filters read back).
    """

    settings: tuple[tuple[str, str], ...] = ()
    application_name: str | None = None

    def for_connection(self, name: str) -> dict[str, str]:
        """The settings of one connection (``name``: a session, or ``control connection``)."""
        chosen = dict(self.settings)
        if self.application_name is not None:
            chosen["application_name"] = f"{self.application_name}/{name}"
        return chosen


#: pg_regress's environment, part by part: what it sets, and the name a conformance run gives it
REGRESS_SETTINGS: dict[str, tuple[str, str]] = {
    "datestyle": ("DateStyle", "Postgres, MDY"),  # PGDATESTYLE
    "timezone": ("TimeZone", "America/Los_Angeles"),  # PGTZ
    "intervalstyle": ("IntervalStyle", "postgres_verbose"),  # PGOPTIONS
    "query_id": ("compute_query_id", "regress"),  # no pg_stat_statements there: EXPLAIN shows no query id
}
REGRESS_PARTS = (*REGRESS_SETTINGS, "application_name")
#: why a spec's output differs without each part (the module's docstring says the same at more length)
REGRESS_REASONS = {
    "datestyle": "DateStyle (pg_regress sets PGDATESTYLE=Postgres, MDY)",
    "timezone": "TimeZone (pg_regress sets PGTZ=America/Los_Angeles)",
    "intervalstyle": "IntervalStyle (pg_regress's PGOPTIONS: postgres_verbose)",
    "query_id": "the Query Identifier line pg_stat_statements adds to EXPLAIN VERBOSE (compute_query_id=regress)",
    "application_name": "application_name (pg_regress's isolation/<spec>/<session>)",
}


def regress(spec_name: str, parts: tuple[str, ...] = REGRESS_PARTS) -> Environment:
    """pg_regress's environment for the spec ``spec_name`` (its file name without ``.spec``), or some ``parts`` of it.

    >>> regress("async-notify").for_connection("listener")["application_name"]
    'isolation/async-notify/listener'
    >>> regress("x", ("datestyle",)).for_connection("s1")
    {'DateStyle': 'Postgres, MDY'}
    """
    unknown = set(parts) - set(REGRESS_PARTS)
    if unknown:
        raise UsageError(f"Unknown part(s) of pg_regress's environment: {', '.join(sorted(unknown))}; the parts are "
                         + "; ".join(f"{part}: {why}" for part, why in REGRESS_REASONS.items()) + ".")
    return Environment(tuple(REGRESS_SETTINGS[part] for part in REGRESS_SETTINGS if part in parts),
                       f"isolation/{spec_name}" if "application_name" in parts else None)


# ----------------------------------------------------------------------------- what a run records


@dataclass
class Event:
    """One step of a permutation as it happened: when, whether it waited, on what, and how it ended."""

    step: str
    session: str
    sql: str
    launched_s: float
    order: int  # its place among the permutation's launches and completions
    waiting_s: float | None = None  # when it was seen waiting (None: it never waited)
    completed_s: float | None = None
    completed_order: int | None = None
    released_by: str | None = None  # the holder's step whose completion released it (None: it ended otherwise)
    held_s: float | None = None  # reported waiting by a marker ((*), another step) without waiting for a lock
    lock: dict = field(default_factory=dict)  # locktype, mode, what, held_by: from pg_locks while it waited
    error: str | None = None  # "ERROR:  deadlock detected"
    rows: list[dict] = field(default_factory=list)
    text: str = ""  # what the isolation tester printed for its completion


@dataclass
class PermutationRun:
    """One permutation run: its text as the isolation tester prints it, and its events."""

    steps: tuple[PermutationStep, ...]
    sessions: tuple[str, ...]
    lines: list[str] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(self.lines)

    @property
    def name(self) -> str:
        return " ".join(step.name for step in self.steps)


def header(spec: Spec) -> str:
    """What the isolation tester prints before the first permutation: unused steps (its stderr), then the count.

    >>> print(header(parse("session s1\\nstep b { select 1; }\\nstep a { select 2; }\\npermutation b")), end="")
    unused step name: a
    Parsed test spec with 1 sessions
    """
    unused = "".join(f"unused step name: {name}\n" for name in sorted(unused_steps(spec)))
    return unused + f"Parsed test spec with {len(spec.sessions)} sessions\n"


@dataclass
class Outcome:
    """Every permutation run of a spec, with the text and the lanes of each."""

    spec: Spec
    permutations: list[PermutationRun]
    notes: list[str] = field(default_factory=list)  # what the run did beyond the tester's output (rollbacks)
    exited: str | None = None  # the line after which the isolation tester would have exited (a failed setup, ...)

    @property
    def text(self) -> str:
        """The whole output (stdout and stderr, as pg_regress keeps them), comparable with an expected file."""
        return header(self.spec) + "".join(p.text for p in self.permutations)

    def lanes(self, index: int = 0):
        """One permutation drawn as lanes (:func:`labkit.charts.lanes`)."""
        from .charts import lanes

        return lanes(self.permutations[index])

    def __str__(self) -> str:
        return self.text

    def _repr_html_(self) -> str:
        import html

        return f"<pre>{html.escape(self.text)}</pre>"


# ----------------------------------------------------------------------------- one statement, as libpq sees it


@dataclass
class _Result:
    """One PGresult, as the isolation tester prints it after a step (``text``) and as PQexec's caller sees it."""

    status: str  # libpq's name for it: PGRES_TUPLES_OK, PGRES_FATAL_ERROR, ...
    text: str = ""
    rows: list[dict] = field(default_factory=list)
    error: str | None = None  # "SEVERITY:  message", or libpq's own message when the server sent none


def _result(result, encoding: str) -> _Result:
    """A PGresult read into text (in the thread that received it, while it is valid)."""
    from psycopg import pq

    status = pq.ExecStatus(result.status)
    name = f"PGRES_{status.name}"
    if status == pq.ExecStatus.TUPLES_OK:
        names = [(result.fname(j) or b"").decode(encoding) for j in range(result.nfields)]
        values = [[None if (v := result.get_value(i, j)) is None else bytes(v).decode(encoding)
                   for j in range(result.nfields)] for i in range(result.ntuples)]
        return _Result(name, format_table(names, values), [dict(zip(names, row)) for row in values])
    if status == pq.ExecStatus.FATAL_ERROR:
        severity = result.error_field(pq.DiagnosticField.SEVERITY)
        message = result.error_field(pq.DiagnosticField.MESSAGE_PRIMARY)
        if severity and message:  # the detail may hold xids: the tester shows the primary message only
            error = f"{severity.decode(encoding)}:  {message.decode(encoding)}"
            return _Result(name, error + "\n", error=error)
        error = (result.error_message or b"").decode(encoding, "replace")
        return _Result(name, error + "\n", error=error.rstrip("\n"))
    if status in (pq.ExecStatus.COMMAND_OK, pq.ExecStatus.EMPTY_QUERY):
        return _Result(name)
    return _Result(name, f"unexpected result status: {name}\n")


def _lost_result(message: str) -> _Result:
    """The result libpq makes of a connection that ended (no fields: its message only)."""
    return _Result("PGRES_FATAL_ERROR", message + "\n", error=message.rstrip("\n"))


class _Statement:
    """One statement sent on one connection, received as the isolation tester receives it through libpq.

    The thread that owns the connection runs it (:func:`_drive`); the coordinator only reads what
    it has received and asks, through events, for a cancel, for its completion or for its end.
    """

    def __init__(self, sql: str, *, cancel_after_s: float | None = None, notifications: bool = True):
        self.sql = sql
        self.cancel_after_s = cancel_after_s  # a setup or teardown block cancels itself after this long
        self.notifications = notifications  # read the NOTIFY messages at its completion, as after a step
        self.encoding = "utf-8"
        self.early: deque[str] = deque()  # notices parsed before the first result: printed as they come
        self.received: list[tuple[str, Any]] = []  # then ("notice" | "result" | "notify", ...) in libpq's order
        self.sent = threading.Event()  # PQsendQuery has returned
        self.ready = threading.Event()  # libpq is no longer busy (PQisBusy false): the first result, or the end
        self.collect = threading.Event()  # the coordinator completes it: read what is left
        self.abandoned = threading.Event()
        self.cancel_asked = threading.Event()
        self.cancel_done = threading.Event()
        self.cancel_sent = False
        self.send_failed: str | None = None  # libpq's message: the query could not be sent
        self.input_failed: str | None = None  # libpq's message: reading failed before the first result
        self.connection_message = ""  # PQerrorMessage once the last result is in (what PQexec's caller prints)
        self.status: Any = None  # the transaction status after it (psycopg.pq.TransactionStatus)
        self._first_result_in = False
        self._started = time.monotonic()

    # -- in the thread that owns the connection

    def notice(self, chained: Callable | None, result) -> None:
        """The notice receiver: the message as libpq formats it for a notice processor."""
        text = (result.error_message or b"").decode(self.encoding, "replace")
        if self._first_result_in:
            self.received.append(("notice", text))
        else:
            self.early.append(text)
        if chained is not None:
            chained(result)

    def first_result_in(self) -> None:
        self._first_result_in = True
        self.ready.set()

    def tick(self, connection) -> None:
        """Between waits: send the cancel the coordinator asked for (or this block's own, after its time)."""
        if self.cancel_after_s is not None and time.monotonic() - self._started > self.cancel_after_s:
            self.cancel_asked.set()
        if (self.cancel_asked.is_set() or self.abandoned.is_set()) and not self.cancel_done.is_set():
            import psycopg

            try:
                connection.cancel_safe(timeout=5)
                self.cancel_sent = True
            except psycopg.Error as error:
                log.warning("could not cancel %r: %s", self.sql[:60], error)
            self.cancel_done.set()

    # -- in the coordinator's thread

    def request_cancel(self, timeout_s: float = 5.0) -> bool:
        """Ask for a cancel (PQcancelBlocking in the tester); whether it was sent."""
        self.cancel_asked.set()
        self.cancel_done.wait(timeout_s)
        return self.cancel_sent

    def abandon(self) -> None:
        self.abandoned.set()
        self.collect.set()


def _message(pgconn) -> bytes:
    return pgconn.error_message or b""


def _protocol(pgconn, statement: _Statement, tick: Callable[[], None]) -> Generator[Wait, Ready | int, None]:
    """The isolation tester's libpq calls for one sent statement, as a generator: it waits for nothing itself.

    First ``try_complete_step``'s ``PQisBusy`` loop (reading while busy); then ``PQgetResult``
    until it returns NULL, reading only while busy, so that the notices between results arrive
    in libpq's order. After a FATAL error the server's goodbye is left for libpq's own
    ``PQgetResult`` to read, as the tester's does: its message is then libpq's, word for word.
    """
    import psycopg
    from psycopg import pq
    from psycopg.waiting import Wait

    while pgconn.is_busy():
        if not (yield Wait.R):
            tick()
            continue
        try:
            pgconn.consume_input()
        except psycopg.OperationalError:
            statement.input_failed = _message(pgconn).decode(statement.encoding, "replace")
            return
    statement.first_result_in()
    reported, fatal = 0, False
    while True:
        lost = False
        while pgconn.is_busy():
            if not (yield Wait.R):
                tick()
                continue
            if fatal:
                break
            try:
                pgconn.consume_input()
            except psycopg.OperationalError:
                lost = True
                break
        if lost:  # what the tester's blocking PQgetResult returns: libpq's message, past what was reported
            message = _message(pgconn)
            statement.received.append(("result", _lost_result(message[reported:].decode(statement.encoding,
                                                                                        "replace"))))
            statement.connection_message = message.decode(statement.encoding, "replace")
            while pgconn.get_result() is not None:
                pass
            return
        result = pgconn.get_result()
        if result is None:
            statement.connection_message = _message(pgconn).decode(statement.encoding, "replace")
            return
        statement.received.append(("result", _result(result, statement.encoding)))
        if result.status == pq.ExecStatus.FATAL_ERROR:
            reported = len(_message(pgconn))
            fatal = fatal or result.error_field(pq.DiagnosticField.SEVERITY) in (b"FATAL", b"PANIC")
        elif result.status in (pq.ExecStatus.COPY_IN, pq.ExecStatus.COPY_OUT, pq.ExecStatus.COPY_BOTH):
            return  # the tester would loop on it for ever; a spec cannot use COPY


def _notifications(pgconn, statement: _Statement) -> None:
    """``PQconsumeInput`` and ``PQnotifies``, as the tester reads them once a step has completed."""
    import psycopg

    def consume() -> None:
        try:
            pgconn.consume_input()
        except psycopg.OperationalError:
            pass  # a connection that has ended: its queued notifications are still there

    consume()
    while (notify := pgconn.notifies()) is not None:
        statement.received.append(("notify", (notify.relname.decode(statement.encoding),
                                              notify.extra.decode(statement.encoding), notify.be_pid)))
        consume()


def _drive(connection, statement: _Statement) -> _Statement:
    """Run ``statement`` on ``connection``, in the one thread that uses it, holding psycopg's lock throughout.

    psycopg's own generators send it and psycopg's wait function waits (waking every POLL_S to
    send a cancel that was asked for); the notices are taken from libpq's notice receiver for as
    long as the statement runs (psycopg's own receiver still hears them).
    """
    import psycopg
    from psycopg import generators, waiting

    with connection.lock:
        pgconn = connection.pgconn
        statement.encoding = connection.info.encoding
        chained = pgconn.notice_handler
        pgconn.notice_handler = functools.partial(statement.notice, chained)
        try:
            try:
                pgconn.send_query(statement.sql.encode(statement.encoding))
                waiting.wait(generators.send(pgconn), pgconn.socket, interval=POLL_S)
            except psycopg.OperationalError:
                statement.send_failed = _message(pgconn).decode(statement.encoding, "replace")
                return statement
            finally:
                statement.sent.set()
            waiting.wait(_protocol(pgconn, statement, lambda: statement.tick(connection)), pgconn.socket,
                         interval=POLL_S)
            while not statement.collect.wait(POLL_S):  # completed when the tester would complete it
                statement.tick(connection)
            if statement.notifications and not statement.abandoned.is_set():
                _notifications(pgconn, statement)
        except BaseException:  # an interrupt (the coordinator's own control connection): leave it idle
            _settle(connection)
            raise
        finally:
            pgconn.notice_handler = chained
            statement.status = pgconn.transaction_status
            statement.ready.set()
    return statement


def _settle(connection) -> None:
    """After an interrupt in the middle of a statement: cancel it and read its results, so the connection is idle."""
    import psycopg
    from psycopg import generators, pq, waiting

    pgconn = connection.pgconn
    try:
        if pgconn.transaction_status == pq.TransactionStatus.ACTIVE:
            connection.cancel_safe(timeout=5)
            waiting.wait(generators.fetch_many(pgconn), pgconn.socket, interval=POLL_S)
    except psycopg.Error as error:
        log.info("a connection interrupted mid-statement could not be settled: %s", error)


# ----------------------------------------------------------------------------- the isolation tester


class _Exit(Exception):
    """The isolation tester exits here (its ``exit(1)``): the line it printed last is the message."""


@dataclass
class _Active:
    """A step launched and not yet reported complete (the tester's ``active_step``)."""

    pstep: PermutationStep
    future: Future
    statement: _Statement
    event: Event
    targets: dict[str, int]  # a notices marker's step -> the notice count it waits for


class _Runner:
    """``isolationtester.c`` over labkit's sessions, printing into a :class:`PermutationRun`.

    This thread (the coordinator) owns the control connection; each session's connection is used
    only by the thread its session runs a statement in (:func:`_drive`).
    """

    def __init__(self, lab, spec: Spec, *, step_timeout_s: float, on_event: Callable[[PermutationRun], None] | None,
                 environment: Environment | None):
        from . import db

        self.lab, self.spec, self.step_timeout_s, self.on_event = lab, spec, step_timeout_s, on_event
        for session in spec.sessions:  # each a new connection, as the isolation tester's: nothing left from before
            old = lab.sessions.sessions.pop(session.name, None)
            if old is not None:
                old.close()
        self.control = db.connect(lab.conninfo, db.MONITOR)
        self.sessions: dict = {}
        try:
            for session in spec.sessions:
                self.sessions[session.name] = lab.session(session.name)
            if environment is not None:
                self._set(environment)
        except BaseException:
            self.control.close()
            raise
        # Taken once, as the tester does: a session never connects again inside a run.
        self.pids = [session.pid for session in self.sessions.values()]
        self.names = {session.pid: name for name, session in self.sessions.items()}
        self.notices = {name: 0 for name in self.sessions}
        self.status: dict[str, Any] = {name: None for name in self.sessions}
        self.current = PermutationRun((), ())  # the permutation being run
        self.active: dict[str, _Active] = {}  # by session
        self.started = time.monotonic()
        self.order = itertools.count()

    def _set(self, environment: Environment) -> None:
        """Give every connection the environment's settings (for the session, as libpq's PGOPTIONS would)."""
        import psycopg

        from . import db

        def setter(chosen: dict[str, str]):
            sql = "select " + ", ".join("pg_catalog.set_config(%s, %s, false)" for _ in chosen)
            params = [item for pair in chosen.items() for item in pair]
            return lambda connection: connection.execute(sql, params)

        try:
            if environment.for_connection("control connection"):
                setter(environment.for_connection("control connection"))(self.control)
            for name, session in self.sessions.items():
                chosen = environment.for_connection(name)
                if chosen:
                    session.start(setter(chosen), "set_config", reconnect=False).result(timeout=self.step_timeout_s)
                    session.pending = None
        except psycopg.Error as error:
            raise UsageError(f"The sessions could not take the environment's settings: {db.message(error)}.") from None

    def close(self) -> None:
        """Disconnect, as the tester does when it exits: nothing a spec's session held outlives the run.

        Session-level locks, prepared statements, LISTENs and temporary tables go with the
        connections; the next cell's session of the same name is a new connection. A session
        whose step could not be stopped is left to its thread.
        """
        self.control.close()
        for name, session in self.sessions.items():
            if session.busy:
                continue
            if self.lab.sessions.sessions.get(name) is session:
                del self.lab.sessions.sessions[name]
            session.close()

    def _emit(self) -> None:
        if self.on_event is not None:
            self.on_event(self.current)

    def _say(self, name: str, notice: str) -> None:
        """A session's notice, as the tester's notice processor prints and counts it."""
        self.current.lines.append(f"{name}: {notice}")
        self.notices[name] += 1

    def _flush(self, name: str, statement: _Statement) -> None:
        """Print the notices a step has received so far: the tester sees them when it reads that connection."""
        while statement.early:
            self._say(name, statement.early.popleft())

    # -- setup and teardown blocks: PQexec

    def _block(self, name: str | None, sql: str, *, quiet: bool = False) -> _Statement:
        """Run a setup or teardown block (``name``: its session, None: the control connection), as PQexec does.

        It is cancelled after the step timeout (a lock held outside the spec would hold it for ever).
        """
        statement = _Statement(sql, cancel_after_s=self.step_timeout_s, notifications=False)
        statement.collect.set()
        if name is None:
            _drive(self.control, statement)
            return statement
        future = self.sessions[name].start(lambda connection: _drive(connection, statement), sql, reconnect=False)
        try:
            future.result(timeout=2 * self.step_timeout_s + 10)
        except TimeoutError:
            statement.abandon()
            raise UsageError(f"A block of session {name} did not end, even cancelled: {sql[:60]!r}.") from None
        self.sessions[name].pending = None
        self.status[name] = statement.status
        if not quiet:
            for notice in [*statement.early, *(value for kind, value in statement.received if kind == "notice")]:
                self._say(name, notice)
        return statement

    def _print_block(self, statement: _Statement, failure: str) -> bool:
        """What the tester prints after PQexec: the last result's table, or ``failure`` and libpq's message."""
        results = [value for kind, value in statement.received if kind == "result"]
        if statement.send_failed is None and statement.input_failed is None and results:
            last = results[-1]
            if last.status == "PGRES_TUPLES_OK":
                self.current.lines.append(last.text)
                return True
            if last.status == "PGRES_COMMAND_OK":
                return True
        message = statement.send_failed or statement.input_failed or statement.connection_message
        self.current.lines.append(f"{failure} failed: {message}")
        return False

    # -- what the isolation tester does

    def run(self, steps: tuple[PermutationStep, ...], runs: list[PermutationRun]) -> None:
        """``run_permutation``: setups, the steps, teardowns; an :class:`_Exit` where the tester would exit."""
        self.current = PermutationRun(steps, tuple(self.sessions))
        runs.append(self.current)
        self.started = time.monotonic()
        self.order = itertools.count()
        self.active = {}
        self.current.lines.append("\nstarting permutation: " + " ".join(step.name for step in steps) + "\n")
        self._emit()
        for sql in self.spec.setup:
            if not self._print_block(self._block(None, sql), "setup"):
                raise _Exit("setup failed")
        for session in self.spec.sessions:
            if session.setup and not self._print_block(self._block(session.name, session.setup),
                                                       f"setup of session {session.name}"):
                raise _Exit(f"setup of session {session.name} failed")
        self._steps(steps)
        for session in self.spec.sessions:
            if session.teardown:  # a failed teardown is said, and the run goes on
                self._print_block(self._block(session.name, session.teardown), f"teardown of session {session.name}")
        if self.spec.teardown:
            self._print_block(self._block(None, self.spec.teardown), "teardown")
        self._emit()

    def end_transactions(self) -> list[str]:
        """Roll back what the last permutation left open, as the isolation tester's disconnect does; say which."""
        from psycopg.pq import TransactionStatus

        said = []
        for name, status in self.status.items():
            if status in (TransactionStatus.INTRANS, TransactionStatus.INERROR):
                self._block(name, "rollback", quiet=True)
                said.append(f"{name}'s transaction was still open at the end: rolled back, as the isolation tester's "
                            "disconnect would (end it in a step of its own to keep what it did).")
        return said

    def abandon(self) -> list[str]:
        """After an exit, an error or an interrupt: the steps ended, no transaction left open, the teardowns run.

        Nothing of it is printed (the tester, exiting, does none of it); what it did is said in the notes.
        """
        from psycopg.pq import TransactionStatus

        from . import db

        for active in self.active.values():
            active.statement.abandon()
        stuck = []
        for name, active in list(self.active.items()):
            try:
                active.future.result(timeout=self.step_timeout_s + 10)
            except TimeoutError:
                stuck.append(name)
                continue
            except Exception as error:  # noqa: BLE001 - the step's own failure does not stop the cleanup
                log.info("step %s ended with %s", active.pstep.name, error)
            self.sessions[name].pending = None
            self.status[name] = active.statement.status
        self.active.clear()
        rolled_back = []
        for session in self.spec.sessions:
            name = session.name
            if name in stuck or self.status[name] == TransactionStatus.UNKNOWN:
                continue  # still running, or its connection has ended
            if self.status[name] in (TransactionStatus.INTRANS, TransactionStatus.INERROR):
                self._block(name, "rollback", quiet=True)
                rolled_back.append(name)
            if session.teardown:
                self._block(name, session.teardown, quiet=True)
        if self.spec.teardown:
            if self.control.closed:
                self.control = db.connect(self.lab.conninfo, db.MONITOR)
            self._block(None, self.spec.teardown, quiet=True)
        said = "Then labkit ended the steps still running"
        if rolled_back:
            said += ", rolled back " + " and ".join(rolled_back)
        said += " and ran the teardowns, which the isolation tester leaves undone"
        notes = [said + "."]
        if stuck:
            notes.append(f"{' and '.join(stuck)} did not end even when cancelled: connect again with "
                         f"lab.session(...).close() before using {'them' if len(stuck) > 1 else 'it'}.")
        return notes

    def _steps(self, steps: tuple[PermutationStep, ...]) -> None:
        """The steps of one permutation, launched and completed as ``run_permutation`` does."""
        waiting: list[PermutationStep] = []
        for pstep in steps:
            step = self.spec.steps[pstep.name]
            if step.session in self.active:  # its session is still busy: wait for it (and poll the others)
                started = time.monotonic()
                while step.session in self.active:
                    old = self.active[step.session].pstep
                    if not self._try_complete(old, retry=True):
                        waiting.remove(old)
                    waiting = self._try_complete_all(waiting, nonblock=True)
                    waited = time.monotonic() - started
                    if step.session in self.active and waited > 2 * self.step_timeout_s:
                        self.current.lines.append(f"step {self.active[step.session].pstep.name} timed out after "
                                                  f"{int(waited)} seconds\nactive steps are:" +
                                                  "".join(f" {a.pstep.name}" for a in self.active.values()) + "\n")
                        raise _Exit("step timed out")
            self._launch(pstep, step)
            must_wait = self._try_complete(pstep, nonblock=True)
            waiting = self._try_complete_all(waiting, nonblock=True)
            if must_wait:
                waiting.append(pstep)
        waiting = self._try_complete_all(waiting, nonblock=False)
        if waiting:
            self.current.lines.append("failed to complete permutation due to mutually-blocking steps\n")
            raise _Exit("mutually-blocking steps")

    def _launch(self, pstep: PermutationStep, step: Step) -> None:
        statement = _Statement(step.sql)
        future = self.sessions[step.session].start(lambda connection: _drive(connection, statement), step.sql,
                                                   reconnect=False)
        statement.sent.wait()
        if statement.send_failed is not None:
            future.result()
            self.sessions[step.session].pending = None
            self.current.lines.append(f"failed to send query for step {step.name}: {statement.send_failed}\n")
            raise _Exit("failed to send query")
        event = Event(step.name, step.session, step.sql, round(time.monotonic() - self.started, 4), next(self.order))
        targets = {blocker.step: self.notices[self.spec.steps[blocker.step].session] + blocker.notices
                   for blocker in pstep.blockers if blocker.kind == "notices"}
        self.active[step.session] = _Active(pstep, future, statement, event, targets)
        self.current.events.append(event)

    def _try_complete_all(self, waiting: list[PermutationStep], *, nonblock: bool) -> list[PermutationStep]:
        """``try_complete_steps``: complete what can be, repeating while completions or notices may release blockers."""
        while True:
            before = len(waiting)
            notices = dict(self.notices)
            still = [w for w in waiting if self._try_complete(w, retry=True, nonblock=nonblock)]
            has_blocker = any(w.blockers for w in still)
            waiting = still
            if not (has_blocker and (len(waiting) < before or notices != self.notices)):
                return waiting

    def _try_complete(self, pstep: PermutationStep, *, retry: bool = False, nonblock: bool = False) -> bool:
        """``try_complete_step``: True while the step is not (reported) complete."""
        step = self.spec.steps[pstep.name]
        active = self.active[step.session]
        statement, event = active.statement, active.event
        if not retry and any(blocker.kind == "once" for blocker in pstep.blockers):
            self._waiting(step, event, blocked=False)
            return True
        started = time.monotonic()
        cancelled = False
        while not statement.ready.wait(POLL_S):
            self._flush(step.session, statement)
            if nonblock and self._blocked(self.sessions[step.session].pid):
                self._flush(step.session, statement)
                if statement.ready.is_set():
                    break
                if not retry:
                    self._waiting(step, event, blocked=True)
                elif event.waiting_s is None:
                    event.waiting_s = round(time.monotonic() - self.started, 4)
                if not event.lock:
                    event.lock = self._lock_of(self.sessions[step.session].pid)
                return True
            waited = time.monotonic() - started
            if waited > self.step_timeout_s and not cancelled:
                cancelled = True
                if statement.request_cancel():
                    self.current.lines.append(f"isolationtester: canceling step {step.name} after "
                                              f"{int(waited)} seconds\n")
            if waited > 2 * self.step_timeout_s:
                self.current.lines.append(f"step {step.name} timed out after {int(waited)} seconds\n")
                raise _Exit("step timed out")
        self._flush(step.session, statement)
        if statement.input_failed is not None:
            self.current.lines.append(f"PQconsumeInput failed: {statement.input_failed}\n")
            raise _Exit("PQconsumeInput failed")
        if self._has_blocker(pstep, active.targets):
            if not retry:
                self._waiting(step, event, blocked=False)
            return True
        self.current.lines.append(f"step {step.name}: <... completed>\n" if retry else f"step {step.name}: {step.sql}\n")
        self._complete(step, active)
        return False

    def _complete(self, step: Step, active: _Active) -> None:
        """The rest of the step's results, its notices and notifications, printed as the tester prints them."""
        statement, event = active.statement, active.event
        statement.collect.set()
        started = time.monotonic()
        while True:  # the tester's PQgetResult loop blocks here: a step whose later statement waits, waits
            try:
                active.future.result(timeout=0.1)
                break
            except TimeoutError:
                waited = time.monotonic() - started
                if waited > self.step_timeout_s:
                    statement.request_cancel(timeout_s=0)
                if waited > 2 * self.step_timeout_s:
                    self.current.lines.append(f"step {step.name} timed out after {int(waited)} seconds\n")
                    raise _Exit("step timed out") from None
        self.sessions[step.session].pending = None
        self.status[step.session] = statement.status
        del self.active[step.session]
        texts, errors, rows = [], [], []
        for kind, value in statement.received:
            if kind == "notice":
                self._say(step.session, value)
                texts.append(f"{step.session}: {value}")
                continue
            if kind == "notify":
                channel, payload, pid = value
                sender = self.names.get(pid, f"PID {pid}")
                text = f'{step.session}: NOTIFY "{channel}" with payload "{payload}" from {sender}\n'
            else:
                text = value.text
                if value.error:
                    errors.append(value.error)
                if value.status == "PGRES_TUPLES_OK":
                    rows = value.rows
            self.current.lines.append(text)
            texts.append(text)
        event.completed_s = round(time.monotonic() - self.started, 4)
        event.completed_order = next(self.order)
        event.error, event.rows, event.text = (errors[-1] if errors else None), rows, "".join(texts)
        event.released_by = _releaser(event, self.current.events)
        self._emit()

    def _waiting(self, step: Step, event: Event, *, blocked: bool) -> None:
        """Print ``<waiting ...>``: for a lock the server made it wait for (``blocked``), or because of a marker."""
        self.current.lines.append(f"step {step.name}: {step.sql} <waiting ...>\n")
        now = round(time.monotonic() - self.started, 4)
        if blocked:
            event.waiting_s = now
        else:
            event.held_s = now
        self._emit()

    def _has_blocker(self, pstep: PermutationStep, targets: dict[str, int]) -> bool:
        for blocker in pstep.blockers:
            if blocker.kind == "step":
                other = self.active.get(self.spec.steps[blocker.step].session)
                if other is not None and other.pstep.name == blocker.step:
                    return True
            elif blocker.kind == "notices":
                if self.notices[self.spec.steps[blocker.step].session] < targets[blocker.step]:
                    return True
        return False

    def _blocked(self, pid: int) -> bool:
        """Whether this session is blocked by another of the spec's sessions (the isolation tester's question)."""
        import psycopg

        from . import db

        try:
            row = self.control.execute("select pg_catalog.pg_isolation_test_session_is_blocked(%s, %s::int[])",
                                       (pid, self.pids)).fetchone()
        except psycopg.Error as error:
            self.current.lines.append(f"lock wait query failed: {db.message(error)}\n")
            raise _Exit("lock wait query failed") from None
        return bool(row and row[0])

    def _lock_of(self, pid: int) -> dict:
        """The lock a waiting session asks for, and which sessions hold it (for the lanes)."""
        import psycopg

        try:
            row = self.control.execute(query("lock_of"), {"pid": pid}).fetchone()
        except psycopg.Error as error:  # the lanes go without it; the tester's own question is _blocked's
            log.info("could not read the lock of pid %s: %s", pid, error)
            return {}
        if row is None:
            return {}
        return {"locktype": row[0], "mode": row[1], "what": row[2],
                "held_by": [self.names.get(holder, f"pid {holder}") for holder in row[3]]}


def _releaser(event: Event, events: list[Event]) -> str | None:
    """The step that released a waiting step (None: it never waited for a lock, or ended by itself).

    The last to complete, of the sessions that held its lock, after it began waiting; a step that
    ended by a lock timeout or a cancel was released by nobody.
    """
    holders = set(event.lock.get("held_by") or [])
    if event.waiting_s is None or not holders or (event.error and "cancel" in event.error):
        return None
    done = [e for e in events if e is not event and e.session in holders and e.completed_order is not None
            and e.completed_order < (event.completed_order or 0) and (e.completed_s or 0) >= event.waiting_s]
    return max(done, key=lambda e: e.completed_order or 0).step if done else None


def run(lab, spec: Spec | str, *, permutation: str | None = None, step_timeout_s: float = DEFAULT_STEP_TIMEOUT_S,
        on_event: Callable[[PermutationRun], None] | None = None, environment: Environment | None = None) -> Outcome:
    """Run ``spec`` (a :class:`Spec` or its text) in ``lab``'s sessions: one permutation (a line), or all of them.

    Each session of the spec is a new connection, the lab's session of that name while the spec
    runs, closed at its end as the tester's are (``%%sql --session s1`` then connects anew). ``on_event`` hears each step as it waits or completes (the live lanes).
    ``environment``: settings for every connection first (:func:`regress` gives pg_regress's).
    Where the isolation tester would exit (a failed setup, a dead connection, mutually blocking
    steps), the text ends as its output does and ``Outcome.exited`` says why; labkit then cleans up.
    An interrupt ends the running steps, rolls back and runs the teardowns before it goes up.
    """
    if isinstance(spec, str):
        spec = parse(spec)
    chosen = [_permutation(_tokens(permutation))] if permutation else spec.to_run()
    if permutation:
        check(Spec(spec.sessions, spec.setup, spec.teardown, tuple(chosen)))
    runner = _Runner(lab, spec, step_timeout_s=step_timeout_s, on_event=on_event, environment=environment)
    outcome = Outcome(spec, [])
    try:
        for steps in chosen:
            runner.run(steps, outcome.permutations)
        outcome.notes += runner.end_transactions()
    except _Exit as stop:
        outcome.exited = str(stop)
        notes = runner.abandon()
        outcome.notes += [f"The isolation tester exits there ({outcome.exited}). {notes[0]}", *notes[1:]]
    except BaseException:
        runner.abandon()
        raise
    finally:
        runner.close()
    return outcome
