"""Interleavings as data: PostgreSQL's isolation-tester specs, run step by step through labkit's sessions.

A spec is the isolation tester's own format (``src/test/isolation/README`` at REL_18): ``setup``
and ``teardown`` blocks, ``session`` blocks with their own ``setup``, ``step``s and ``teardown``,
and ``permutation`` lines whose steps may carry blocker markers (``s1a(s2b)``, ``s1a(*)``,
``s1a(s2b notices 1)``). :func:`parse` reads it (pure); :func:`run` runs one permutation, or
all of them, the way ``isolationtester.c`` does: each step is sent to its session's own
connection; a step that the server makes wait for a lock (``pg_isolation_test_session_is_blocked``,
as the isolation tester asks it) is reported ``<waiting ...>`` and the next step goes on; its
completion is reported when a later step releases it. The output is the isolation tester's
own text, comparable line by line with an expected file.

Each step is also an :class:`Event` with its times and, when it waited, the lock it waited for
(from ``pg_locks``, read at the moment it was seen waiting) and who held it, so that
:func:`labkit.charts.lanes` can draw the interleaving as one lane per session.

What is not supported, and why: ``notices`` markers count NOTICE messages as psycopg hands them
over (the same count as the isolation tester's), but a notice's text is printed with its
severity, message, detail and hint only; the isolation tester's cancel after
``2 * PG_TEST_TIMEOUT_DEFAULT`` is labkit's ``step_timeout_s`` here (30 s by default: a notebook
must not hang); steps run in sessions of the notebook's database, not a fresh regression
database, so a spec that relies on pg_regress's settings (``PGDATESTYLE``, ``PGTZ``, a locale)
prints what this server's settings give.
"""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

from .errors import UsageError

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
    if value[0] in "eE" or not value[-1].isdigit():
        return False
    return all(ch.isdigit() or ch in ".eE -" for ch in value)


# ----------------------------------------------------------------------------- running it


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


@dataclass
class Outcome:
    """Every permutation run of a spec, with the text and the lanes of each."""

    spec: Spec
    permutations: list[PermutationRun]
    notes: list[str] = field(default_factory=list)  # what the run did beyond the tester's output (rollbacks)

    @property
    def text(self) -> str:
        """The whole output, comparable line by line with the isolation tester's expected file."""
        return f"Parsed test spec with {len(self.spec.sessions)} sessions\n" + "".join(p.text for p in self.permutations)

    def lanes(self, index: int = 0):
        """One permutation drawn as lanes (:func:`labkit.charts.lanes`)."""
        from .charts import lanes

        return lanes(self.permutations[index])

    def __str__(self) -> str:
        return self.text

    def _repr_html_(self) -> str:
        import html

        return f"<pre>{html.escape(self.text)}</pre>"


LOCK_QUERY = """
select l.locktype, l.mode,
       coalesce(l.relation::regclass::text, '') || coalesce(' page ' || l.page, '')
         || coalesce(' tuple ' || l.tuple, '') || coalesce(l.transactionid::text, '')
         || coalesce(l.virtualxid, '')
         || case when l.locktype = 'advisory' then l.classid::text || ',' || l.objid::text else '' end as what,
       pg_blocking_pids(l.pid) as held_by
from pg_locks l
where l.pid = %(pid)s and not l.granted
limit 1
"""


class _Runner:
    """``run_permutation`` of isolationtester.c, over labkit sessions, printing into a :class:`PermutationRun`."""

    def __init__(self, lab, spec: Spec, *, step_timeout_s: float, on_event: Callable[[PermutationRun], None] | None):
        from . import db

        self.lab, self.spec, self.step_timeout_s, self.on_event = lab, spec, step_timeout_s, on_event
        for session in spec.sessions:  # each a new connection, as the isolation tester's: nothing left from before
            old = lab.sessions.sessions.pop(session.name, None)
            if old is not None:
                old.close()
        self.sessions = {session.name: lab.session(session.name) for session in spec.sessions}
        self.control = db.connect(lab.conninfo, db.MONITOR)
        self.notices = {name: 0 for name in self.sessions}
        self._arrived: dict[str, list[str]] = {name: [] for name in self.sessions}
        self._handlers = []
        for name, session in self.sessions.items():
            handler = self._notice_handler(name)
            session.connection.add_notice_handler(handler)
            self._handlers.append((session, handler))
        self.pids = [session.pid for session in self.sessions.values()]
        self.current = PermutationRun((), ())  # the permutation being run
        self.active: dict[str, tuple[PermutationStep, Future, Event, dict[str, int]]] = {}  # by session
        self.started = time.monotonic()
        self.order = itertools.count()

    def _notice_handler(self, name: str):
        def handle(diagnostic) -> None:  # in the session's thread, as the server sends it
            text = f"{diagnostic.severity}:  {diagnostic.message_primary}\n"
            for label, value in (("DETAIL", diagnostic.message_detail), ("HINT", diagnostic.message_hint)):
                if value:
                    text += f"{label}:  {value}\n"
            self._arrived[name].append(f"{name}: {text}")
        return handle

    def _flush(self, name: str) -> None:
        """Print the notices a session has received: the tester sees them when it reads that session."""
        arrived = self._arrived[name]
        while arrived:
            line = arrived.pop(0)
            self.notices[name] += 1
            self.current.lines.append(line)

    def close(self) -> None:
        for session, handler in self._handlers:
            session.connection.remove_notice_handler(handler)
        self.control.close()

    # -- what the isolation tester does

    def run(self, steps: tuple[PermutationStep, ...]) -> PermutationRun:
        run = PermutationRun(steps, tuple(self.sessions))
        self.current = run
        self.started = time.monotonic()
        self.order = itertools.count()
        self.active = {}
        run.lines.append("\nstarting permutation: " + " ".join(step.name for step in steps) + "\n")
        try:
            for sql in self.spec.setup:
                self._exec(self.control, sql, "setup")
            for session in self.spec.sessions:
                if session.setup:
                    self._exec(self.sessions[session.name].connection, session.setup,
                               f"setup of session {session.name}", session.name)
            self._steps(steps)
        except BaseException:
            self._abandon()
            raise
        for session in self.spec.sessions:
            if session.teardown:
                self._exec(self.sessions[session.name].connection, session.teardown, None, session.name)
        if self.spec.teardown:
            self._exec(self.control, self.spec.teardown, None)
        return run

    def end_transactions(self) -> list[str]:
        """Roll back what the last permutation left open, as the isolation tester's disconnect does; say which."""
        from psycopg.pq import TransactionStatus

        said = []
        for name, session in self.sessions.items():
            connection = session.connection
            if not connection.closed and connection.info.transaction_status != TransactionStatus.IDLE:
                _execute(connection, "rollback", timeout_s=self.step_timeout_s)
                said.append(f"{name}'s transaction was still open at the end: rolled back, as the isolation tester's "
                            "disconnect would (end it in a step of its own to keep what it did).")
        return said

    def _abandon(self) -> None:
        """After an error: nothing left running, no transaction left open, the teardowns run as far as they can."""
        for name in list(self.active):
            self.sessions[name].cancel()
        self.active.clear()
        from psycopg.pq import TransactionStatus

        for session in self.spec.sessions:
            connection = self.sessions[session.name].connection
            if not connection.closed and connection.info.transaction_status != TransactionStatus.IDLE:
                _execute(connection, "rollback", timeout_s=self.step_timeout_s)
            if session.teardown and not connection.closed:
                self._exec(connection, session.teardown, None, session.name)
        if self.spec.teardown and not self.control.closed:
            self._exec(self.control, self.spec.teardown, None)

    def _steps(self, steps: tuple[PermutationStep, ...]) -> None:
        """The steps of one permutation, launched and completed as ``run_permutation`` does."""
        waiting: list[PermutationStep] = []
        for pstep in steps:
            step = self.spec.steps[pstep.name]
            if step.session in self.active:  # its session is still busy: wait for it (and poll the others)
                deadline = time.monotonic() + 2 * self.step_timeout_s
                while step.session in self.active:
                    old = self.active[step.session][0]
                    if not self._try_complete(old, retry=True):
                        waiting.remove(old)
                    waiting = self._try_complete_all(waiting, nonblock=True)
                    if step.session in self.active and time.monotonic() > deadline:
                        raise UsageError(f"Step {self.active[step.session][0].name} did not end within "
                                         f"{2 * self.step_timeout_s:.0f} s, and {step.name} must wait for it: "
                                         "check the permutation.")
            self._launch(pstep, step)
            must_wait = self._try_complete(pstep, nonblock=True)
            waiting = self._try_complete_all(waiting, nonblock=True)
            if must_wait:
                waiting.append(pstep)
        waiting = self._try_complete_all(waiting, nonblock=False)
        if waiting:
            raise UsageError("The permutation could not complete: its steps block each other (" +
                             ", ".join(w.name for w in waiting) + ").")

    def _exec(self, connection, sql: str, failing: str | None, session: str | None = None) -> None:
        """A setup or teardown block: its result tables printed; a failure of setup stops the permutation.

        It is cancelled after the step timeout (a lock held by a session outside the spec would hold it forever).
        """
        outcome = _execute(connection, sql, timeout_s=self.step_timeout_s)
        if session is not None:
            self._flush(session)
        self.current.lines.append(outcome.text)
        if outcome.error and failing:
            raise UsageError(f"{failing} failed: {outcome.error.strip()}")

    def _launch(self, pstep: PermutationStep, step: Step) -> None:
        session = self.sessions[step.session]
        future = session.start(lambda connection: _execute(connection, step.sql), step.sql)
        event = Event(step.name, step.session, step.sql, round(time.monotonic() - self.started, 4), next(self.order))
        targets = {blocker.step: self.notices[self.spec.steps[blocker.step].session] + blocker.notices
                   for blocker in pstep.blockers if blocker.kind == "notices"}
        self.active[step.session] = (pstep, future, event, targets)
        self.current.events.append(event)

    def _try_complete_all(self, waiting: list[PermutationStep], *, nonblock: bool) -> list[PermutationStep]:
        """``try_complete_steps``: complete what can be, repeating while completions may release blockers."""
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
        _, future, event, targets = self.active[step.session]
        if not retry and any(blocker.kind == "once" for blocker in pstep.blockers):
            self._waiting(step, event, blocked=False)
            return True
        started = time.monotonic()
        cancelled = False
        while not future.done():
            try:
                future.result(timeout=POLL_S)
                break
            except TimeoutError:
                pass
            self._flush(step.session)
            if nonblock and self._blocked(self.sessions[step.session].pid):
                if not retry:
                    self._waiting(step, event, blocked=True)
                elif event.waiting_s is None:
                    event.waiting_s = round(time.monotonic() - self.started, 4)
                if not event.lock:
                    event.lock = self._lock_of(self.sessions[step.session].pid)
                return True
            waited = time.monotonic() - started
            if waited > self.step_timeout_s and not cancelled:
                self.sessions[step.session].connection.cancel_safe()
                self.current.lines.append(f"isolationtester: canceling step {step.name} after "
                                          f"{int(waited)} seconds\n")
                cancelled = True
            if waited > 2 * self.step_timeout_s:
                raise UsageError(f"Step {step.name} timed out after {int(waited)} seconds.")
        self._flush(step.session)
        if self._has_blocker(pstep, targets):
            if not retry:
                self._waiting(step, event, blocked=False)
            return True
        outcome = future.result()
        self.current.lines.append(f"step {step.name}: <... completed>\n" if retry else f"step {step.name}: {step.sql}\n")
        self.current.lines.append(outcome.text)
        event.completed_s = round(time.monotonic() - self.started, 4)
        event.completed_order = next(self.order)
        event.error, event.rows, event.text = outcome.error, outcome.rows, outcome.text
        event.released_by = _releaser(event, self.current.events)
        del self.active[step.session]
        self.sessions[step.session].pending = None
        if self.on_event is not None:
            self.on_event(self.current)
        return False

    def _waiting(self, step: Step, event: Event, *, blocked: bool) -> None:
        """Print ``<waiting ...>``: for a lock the server made it wait for (``blocked``), or because of a marker."""
        self.current.lines.append(f"step {step.name}: {step.sql} <waiting ...>\n")
        now = round(time.monotonic() - self.started, 4)
        if blocked:
            event.waiting_s = now
        else:
            event.held_s = now
        if self.on_event is not None:
            self.on_event(self.current)

    def _has_blocker(self, pstep: PermutationStep, targets: dict[str, int]) -> bool:
        for blocker in pstep.blockers:
            if blocker.kind == "step":
                other = self.active.get(self.spec.steps[blocker.step].session)
                if other is not None and other[0].name == blocker.step:
                    return True
            elif blocker.kind == "notices":
                if self.notices[self.spec.steps[blocker.step].session] < targets[blocker.step]:
                    return True
        return False

    def _blocked(self, pid: int) -> bool:
        """Whether this session is blocked by another of the spec's sessions (the isolation tester's question)."""
        row = self.control.execute("select pg_catalog.pg_isolation_test_session_is_blocked(%s, %s)",
                                   (pid, self.pids)).fetchone()
        return bool(row and row[0])

    def _lock_of(self, pid: int) -> dict:
        """The lock a waiting session asks for, and which sessions hold it (for the lanes)."""
        row = self.control.execute(LOCK_QUERY, {"pid": pid}).fetchone()
        if row is None:
            return {}
        names = {session.pid: name for name, session in self.sessions.items()}
        return {"locktype": row[0], "mode": row[1], "what": row[2],
                "held_by": [names.get(holder, f"pid {holder}") for holder in row[3]]}


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


@dataclass
class _Executed:
    text: str
    error: str | None = None
    rows: list[dict] = field(default_factory=list)


def _execute(connection, sql: str, *, timeout_s: float | None = None) -> _Executed:
    """Send ``sql`` as one simple query (libpq's PQsendQuery, as the isolation tester) and print each result.

    ``timeout_s``: cancelled after that long (a step's own timeout is the caller's: it reports the cancel).
    """
    import psycopg
    from psycopg import pq

    pgconn = connection.pgconn
    encoding = connection.info.encoding
    try:
        pgconn.send_query(sql.encode(encoding))  # raises when libpq cannot send it
        while pgconn.flush():  # a non-blocking connection: what is left to send, sent
            _wait(pgconn.socket, write=True)
    except psycopg.OperationalError as failed:
        return _Executed(f"failed to send query: {failed}\n", str(failed))
    parts, error, rows = [], None, []
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        # libpq's PQgetResult would block inside C with the interpreter's lock held: wait here instead
        pgconn.consume_input()
        while pgconn.is_busy():
            _wait(pgconn.socket)
            pgconn.consume_input()
            if deadline is not None and time.monotonic() > deadline:
                connection.cancel_safe()  # the statement then ends with "canceling statement due to user request"
                deadline = None
        result = pgconn.get_result()
        if result is None:
            break
        status = result.status
        if status == pq.ExecStatus.TUPLES_OK:
            names = [(result.fname(j) or b"").decode(encoding) for j in range(result.nfields)]
            values = [[None if (v := result.get_value(i, j)) is None else v.decode(encoding)
                       for j in range(result.nfields)] for i in range(result.ntuples)]
            parts.append(format_table(names, values))
            rows = [dict(zip(names, row)) for row in values]
        elif status == pq.ExecStatus.FATAL_ERROR:
            severity = result.error_field(pq.DiagnosticField.SEVERITY)
            message = result.error_field(pq.DiagnosticField.MESSAGE_PRIMARY)
            if severity and message:
                error = f"{severity.decode(encoding)}:  {message.decode(encoding)}"
            else:
                error = (result.error_message or b"").decode(encoding, "replace").rstrip("\n")
            parts.append(error + "\n")
        elif status not in (pq.ExecStatus.COMMAND_OK, pq.ExecStatus.EMPTY_QUERY):
            parts.append(f"unexpected result status: {status.name}\n")
    return _Executed("".join(parts), error, rows)


def _wait(socket: int, *, write: bool = False) -> None:
    """Wait (the interpreter's lock released) until the connection's socket can be read, or written.

    ``selectors`` picks poll or epoll where they exist (select refuses descriptors past 1023, which a
    busy kernel reaches) and select on Windows, where it takes sockets.
    """
    import selectors

    with selectors.DefaultSelector() as selector:
        selector.register(socket, selectors.EVENT_WRITE if write else selectors.EVENT_READ)
        selector.select(1.0)


def run(lab, spec: Spec | str, *, permutation: str | None = None, step_timeout_s: float = DEFAULT_STEP_TIMEOUT_S,
        on_event: Callable[[PermutationRun], None] | None = None) -> Outcome:
    """Run ``spec`` (a :class:`Spec` or its text) in ``lab``'s sessions: one permutation (a line), or all of them.

    Each session of the spec is the lab's session of that name (``%%sql --session s1`` reads it
    afterwards). ``on_event`` hears each step as it waits or completes (the live lanes).
    """
    if isinstance(spec, str):
        spec = parse(spec)
    chosen = [_permutation(_tokens(permutation))] if permutation else spec.to_run()
    if permutation:
        check(Spec(spec.sessions, spec.setup, spec.teardown, tuple(chosen)))
    runner = _Runner(lab, spec, step_timeout_s=step_timeout_s, on_event=on_event)
    runs = []
    try:
        for steps in chosen:
            runs.append(runner.run(steps))
        notes = runner.end_transactions()
    finally:
        runner.close()
    return Outcome(spec, runs, notes)
