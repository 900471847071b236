"""pgbench without a server: options in, argv out; output text in, numbers out.

Everything here is pure (no process, no connection; two reads: a ``-f`` script's file, and the
machine's size from its cgroup for a ``-j`` not given), so it is tested against real recorded
output of pgbench 15 and 18 and the older formats quoted in the articles.
The process itself is run by :mod:`labkit.runner`; its outputs become a record in
:mod:`labkit.run_record`.

    >>> spec = parse_options("-c 8 -T 5 -M prepared --name demo".split(), script="select 1;")
    >>> spec.clients, spec.duration_s, spec.mode, spec.name
    (8, 5, 'prepared', 'demo')
    >>> parse_progress("progress: 2.0 s, 150.5 tps, lat 6.633 ms stddev 1.204, 0 failed").tps
    150.5
"""

from __future__ import annotations

import math
import re
import shlex
import statistics
from dataclasses import dataclass, replace
from pathlib import Path

from .errors import UsageError

# ----------------------------------------------------------------------------- options


@dataclass(frozen=True)
class Script:
    """One pgbench script: its text and weight (pgbench's ``-f file@weight``)."""

    name: str
    text: str
    weight: int = 1


@dataclass(frozen=True)
class Spec:
    """A pgbench run, as labkit understands it."""

    scripts: tuple[Script, ...]
    name: str = "run"
    clients: int = 1
    jobs: int | None = None
    duration_s: float | None = None
    transactions: int | None = None
    mode: str = "simple"
    defines: tuple[tuple[str, str], ...] = ()
    rate: float | None = None
    latency_limit_ms: float | None = None
    max_tries: int | None = None
    random_seed: str | None = None
    sampling_rate: float | None = None
    flags: tuple[str, ...] = ()  # flags passed through as they are (-C, --failures-detailed, ...)
    transaction_log: bool = True  # pgbench's -l log: 100 ms bins and latency percentiles come from it

    @property
    def threads(self) -> int:
        """Pgbench's -j: one thread per client up to the cores this process may use (a container's limit)."""
        from .profiles import machine_size

        if self.jobs:
            return self.jobs
        return max(1, min(self.clients, round(machine_size()[0])))

    def validated(self) -> Spec:
        """This spec, if pgbench would accept it; else a :class:`UsageError` saying what to change."""
        for option, number in (("-c (clients)", self.clients), ("-j (threads)", self.jobs),
                               ("-T (seconds)", self.duration_s), ("-t (transactions)", self.transactions)):
            if number is not None and (isinstance(number, bool) or not isinstance(number, (int, float))):
                raise UsageError(f"{option} must be a number, not {number!r}.")
        if self.clients < 1:
            raise UsageError("-c must be at least 1.")
        if self.jobs is not None and (self.jobs < 1 or self.jobs > self.clients):
            raise UsageError(f"-j must be between 1 and the number of clients ({self.clients}).")
        if self.duration_s is not None and self.transactions is not None:
            raise UsageError("Give either -T (seconds) or -t (transactions per client), not both.")
        if self.duration_s is not None and self.duration_s <= 0:
            raise UsageError("-T must be a positive number of seconds.")
        if self.transactions is not None and self.transactions < 1:
            raise UsageError("-t must be at least 1.")
        if self.mode not in ("simple", "extended", "prepared"):
            raise UsageError(f"-M must be simple, extended or prepared, not {self.mode!r}.")
        if self.sampling_rate is not None and not self.transaction_log:
            raise UsageError("--sampling-rate samples the transaction log, which --no-log turns off: drop one of them.")
        if self.sampling_rate is not None and not 0 < self.sampling_rate <= 1:
            raise UsageError("--sampling-rate is the share of transactions logged: a number above 0 and at most 1.")
        if not self.scripts or not any(s.text.strip() for s in self.scripts):
            raise UsageError("The pgbench script is empty: write SQL in the cell body or pass -f FILE.")
        return self


def check_capacity(spec: Spec, free_connections: int) -> None:
    """Refuse a run whose clients would not all get a connection (pgbench would abort them one by one).

    >>> check_capacity(Spec((Script("a", "select 1"),), clients=50), 40)
    Traceback (most recent call last):
    ...
    labkit.errors.UsageError: 50 clients need 50 connections but only 40 are free on this server: lower -c, or raise the limit with lab.need_connections(50).
    """
    if spec.clients > free_connections:
        raise UsageError(
            f"{spec.clients} clients need {spec.clients} connections but only {free_connections} are free "
            f"on this server: lower -c, or raise the limit with lab.need_connections({spec.clients})."
        )


# option -> (key, kind); kind: "int", "float", "str", "flag", "script", "define"
_OPTIONS: dict[str, tuple[str, str]] = {
    "-c": ("clients", "int"), "--client": ("clients", "int"),
    "-j": ("jobs", "int"), "--jobs": ("jobs", "int"),
    "-T": ("duration_s", "float"), "--time": ("duration_s", "float"),
    "-t": ("transactions", "int"), "--transactions": ("transactions", "int"),
    "-M": ("mode", "str"), "--protocol": ("mode", "str"),
    "-D": ("defines", "define"), "--define": ("defines", "define"),
    "-R": ("rate", "float"), "--rate": ("rate", "float"),
    "-L": ("latency_limit_ms", "float"), "--latency-limit": ("latency_limit_ms", "float"),
    "--max-tries": ("max_tries", "int"),
    "--random-seed": ("random_seed", "str"),
    "--sampling-rate": ("sampling_rate", "float"),
    "-f": ("scripts", "script"), "--file": ("scripts", "script"),
    "--name": ("name", "str"),
    "--no-log": ("transaction_log", "off"),
    "-C": ("flags", "flag"), "--connect": ("flags", "flag"),
    "--failures-detailed": ("flags", "flag"),
    "--verbose-errors": ("flags", "flag"),
    "--exit-on-abort": ("flags", "flag"),
    # accepted and ignored: labkit always passes them
    "-n": ("", "ignore"), "--no-vacuum": ("", "ignore"),
    "-r": ("", "ignore"), "--report-per-command": ("", "ignore"),
}

# Options labkit sets itself; saying why is kinder than "unknown option".
_MANAGED = {
    "-P": "labkit always reports progress every second (-P 1)",
    "--progress": "labkit always reports progress every second (-P 1)",
    "-l": "labkit writes the transaction log itself (turn it off with --no-log)",
    "--log": "labkit writes the transaction log itself (turn it off with --no-log)",
    "--log-prefix": "labkit chooses where the transaction log goes",
    "--aggregate-interval": "labkit bins the transaction log itself (1 s and 100 ms)",
    "-h": "the lab server is chosen by labkit.start() / LABKIT_DSN",
    "-p": "the lab server is chosen by labkit.start() / LABKIT_DSN",
    "-U": "the lab server is chosen by labkit.start() / LABKIT_DSN",
    "-d": "runs go to the notebook's own database",
    "-i": "initialise tables with %%sql cells instead",
    "--initialize": "initialise tables with %%sql cells instead",
}


def split_options(line: str) -> list[str]:
    r"""Split a cell's option line into words as a shell would, but keep backslashes (Windows paths).

    >>> split_options(r'-c 8 -f C:\labs\my.sql@2 -f "/home/a b/x.sql" --name=try')
    ['-c', '8', '-f', 'C:\\labs\\my.sql@2', '-f', '/home/a b/x.sql', '--name=try']
    """
    lexer = shlex.shlex(line, posix=True, punctuation_chars=False)
    lexer.whitespace_split = True
    lexer.escape = ""  # a backslash is part of a path, not an escape
    try:
        return list(lexer)
    except ValueError as error:
        raise UsageError(f"Could not read the options ({error}): check the quotes.") from None


def parse_options(argv: list[str] | str = "", *, script: str | None = None, name: str | None = None,
                  defaults: dict | None = None, **chosen) -> Spec:
    """Parse pgbench-style options (plus ``--name`` and ``--no-log``) into a checked :class:`Spec`.

    ``script`` is the cell body, used when no ``-f`` is given. ``chosen`` fields of :class:`Spec`
    (``clients=8, duration_s=5`` ...; None means not chosen) are what
    :meth:`labkit.lab.Lab.pgbench` passes as keyword arguments: they go with the options, and a
    field given both ways with two values is refused. ``defaults`` (the profile's clients and
    duration, :meth:`labkit.profiles.Profile.run_defaults`) fill what neither gives; a run
    given ``-t`` takes no default duration. Unknown options raise :class:`UsageError` with a
    one-line hint.

    >>> parse_options("-T 5", script="select 1", clients=4, defaults={"clients": 8, "duration_s": 15}).clients
    4
    >>> parse_options("-t 100", script="select 1", defaults={"clients": 8, "duration_s": 15}).duration_s is None
    True
    """
    if isinstance(argv, str):
        argv = split_options(argv)
    values: dict = {}
    scripts: list[Script] = []
    defines: list[tuple[str, str]] = []
    flags: list[str] = []
    index = 0
    while index < len(argv):
        token = argv[index]
        index += 1
        option, inline = token, None
        if token.startswith("--") and "=" in token:
            option, inline = token.split("=", 1)
        elif re.fullmatch(r"-[A-Za-z].+", token) and token[:2] in _OPTIONS and _OPTIONS[token[:2]][1] not in ("flag", "ignore"):
            option, inline = token[:2], token[2:]  # -c64, -T10
        if option in _MANAGED:
            raise UsageError(f"pgbench option {option} is not needed here: {_MANAGED[option]}.")
        if option not in _OPTIONS:
            raise UsageError(f"Unknown pgbench option {token!r}. Known here: {known_options()}.")
        key, kind = _OPTIONS[option]
        if kind == "ignore":
            continue
        if kind == "flag":
            flags.append(option)
            continue
        if kind == "off":
            values[key] = False
            continue
        if inline is None:
            if index >= len(argv):
                raise UsageError(f"pgbench option {option} needs a value.")
            inline = argv[index]
            index += 1
        if kind == "script":
            scripts.append(_script_from_file(inline))
        elif kind == "define":
            if "=" not in inline:
                raise UsageError(f"-D needs NAME=VALUE, not {inline!r}.")
            key, value = inline.split("=", 1)
            defines.append((key, value))
        else:
            values[key] = _convert(option, inline, kind)
    for key, value in {"name": name, **chosen}.items():
        if value is None:
            continue
        if key in values and values[key] != value:
            raise UsageError(f"{key} is given twice, as {value!r} and in the options as {values[key]!r}: keep one.")
        values[key] = value
    values.setdefault("name", "run")
    for key, value in (defaults or {}).items():
        if key == "duration_s" and "transactions" in values:
            continue
        values.setdefault(key, value)
    if values.get("duration_s") is None and values.get("transactions") is None:
        values["duration_s"] = 10
    if not scripts:
        scripts = [Script(f"{values['name']}.sql", script or "")]
    spec = Spec(scripts=tuple(scripts), defines=tuple(defines), flags=tuple(flags), **values)
    return spec.validated()


def known_options() -> str:
    """The options ``%%pgbench`` takes, for an error message (from the table that parses them)."""
    return " ".join(sorted(option for option, (_, kind) in _OPTIONS.items() if kind != "ignore"))


def _convert(option: str, value: str, kind: str):
    try:
        if kind == "int":
            return int(value)
        if kind == "float":
            number = float(value)
            return int(number) if number.is_integer() else number
    except ValueError:
        raise UsageError(f"pgbench option {option} needs a number, not {value!r}.") from None
    return value


def _script_from_file(argument: str) -> Script:
    path, weight = argument, 1
    match = re.fullmatch(r"(.+)@(\d+)", argument)
    if match:
        path, weight = match.group(1), int(match.group(2))
    file = Path(path).expanduser()
    if not file.exists():
        raise UsageError(f"Script file {path} does not exist (paths are relative to the notebook's folder).")
    return Script(file.name, file.read_text(encoding="utf-8"), weight)


def build_argv(spec: Spec, script_paths: list[Path], *, log_prefix: Path | None = None) -> list[str]:
    """The pgbench command line (without the program name) for ``spec``.

    It names no server and no database: pgbench reads them from libpq's environment
    variables (PGHOST, PGDATABASE, ...), so no password is ever in a command line.

    >>> build_argv(Spec((Script("a.sql", "select 1;"),), clients=4, duration_s=5, jobs=2),
    ...            [Path("a.sql")])
    ['-n', '-r', '-P', '1', '-c', '4', '-j', '2', '-M', 'simple', '-T', '5', '-f', 'a.sql@1']
    """
    argv = ["-n", "-r", "-P", "1", "-c", str(spec.clients), "-j", str(spec.threads), "-M", spec.mode]
    if spec.duration_s is not None:
        argv += ["-T", _number(spec.duration_s)]
    if spec.transactions is not None:
        argv += ["-t", str(spec.transactions)]
    if spec.rate is not None:
        argv += ["-R", _number(spec.rate)]
    if spec.latency_limit_ms is not None:
        argv += ["-L", _number(spec.latency_limit_ms)]
    if spec.max_tries is not None:
        argv += ["--max-tries", str(spec.max_tries)]
    if spec.random_seed is not None:
        argv += ["--random-seed", spec.random_seed]
    for name, value in spec.defines:
        argv += ["-D", f"{name}={value}"]
    argv += list(spec.flags)
    if log_prefix is not None and spec.transaction_log:
        argv += ["-l", "--log-prefix", str(log_prefix)]
        if spec.sampling_rate is not None:
            argv += ["--sampling-rate", _number(spec.sampling_rate)]
    for script, path in zip(spec.scripts, script_paths):
        argv += ["-f", f"{path}@{script.weight}"]
    return argv


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


# ----------------------------------------------------------------------------- progress


@dataclass(frozen=True)
class Progress:
    """One ``-P`` line: a second (or interval) of the run."""

    t: float
    tps: float
    lat_ms: float | None
    stddev_ms: float | None
    failed: int = 0
    retried: int = 0
    retries: int = 0
    lag_ms: float | None = None
    skipped: int = 0


_PROGRESS = re.compile(
    r"^progress: (?P<t>[\d.]+) s, (?P<tps>[\d.]+) tps, lat (?P<lat>[-\w.]+) ms stddev (?P<stddev>[-\w.]+)"
    r"(?P<rest>.*)$"
)


def _float_or_none(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return None if math.isnan(value) else value


def parse_progress(line: str) -> Progress | None:
    """Parse a ``progress:`` line; None for any other line.

    Old pgbench printed ``lat -nan ms`` for a second with no transaction;
    new pgbench prints ``lat 0.000 ms``. Both mean: no latency known.
    """
    match = _PROGRESS.match(line.strip())
    if not match:
        return None
    tps = float(match["tps"])
    lat = _float_or_none(match["lat"])
    stddev = _float_or_none(match["stddev"])
    if tps == 0:
        lat = stddev = None
    rest = match["rest"]

    def count(word: str) -> int:
        found = re.search(rf"(\d+) {word}\b", rest)
        return int(found.group(1)) if found else 0

    lag = re.search(r"lag ([\d.]+) ms", rest)
    return Progress(
        t=float(match["t"]),
        tps=tps,
        lat_ms=lat,
        stddev_ms=stddev,
        failed=count("failed"),
        retried=count("retried"),
        retries=count("retries"),
        lag_ms=float(lag.group(1)) if lag else None,
        skipped=count("skipped"),
    )


# ----------------------------------------------------------------------------- summary


@dataclass(frozen=True)
class StatementLatency:
    script: int
    latency_ms: float
    failures: int | None
    retries: int | None
    command: str


@dataclass(frozen=True)
class Summary:
    """pgbench's closing report (stdout)."""

    version: str | None = None
    transaction_type: str | None = None
    mode: str | None = None
    clients: int | None = None
    threads: int | None = None
    duration_s: float | None = None
    transactions_per_client: int | None = None
    transactions: int | None = None
    transactions_planned: int | None = None
    failed: int = 0
    serialization_failures: int | None = None
    deadlock_failures: int | None = None
    retried: int | None = None
    retries: int | None = None
    latency_avg_ms: float | None = None
    latency_stddev_ms: float | None = None
    initial_connection_ms: float | None = None
    tps: float | None = None
    tps_including_connections: float | None = None
    statements: tuple[StatementLatency, ...] = ()
    scripts: tuple[dict, ...] = ()


_SUMMARY_FIELDS = [
    (r"^pgbench \((?P<v>[\d.]+\w*)", "version", str),
    (r"^transaction type: (?P<v>.+)$", "transaction_type", str),
    (r"^query mode: (?P<v>\w+)", "mode", str),
    (r"^number of clients: (?P<v>\d+)", "clients", int),
    (r"^number of threads: (?P<v>\d+)", "threads", int),
    (r"^duration: (?P<v>[\d.]+) s", "duration_s", float),
    (r"^number of transactions per client: (?P<v>\d+)", "transactions_per_client", int),
    (r"^number of failed transactions: (?P<v>\d+)", "failed", int),
    (r"^number of serialization failures: (?P<v>\d+)", "serialization_failures", int),
    (r"^number of deadlock failures: (?P<v>\d+)", "deadlock_failures", int),
    (r"^number of transactions retried: (?P<v>\d+)", "retried", int),
    (r"^total number of retries: (?P<v>\d+)", "retries", int),
    (r"^latency average = (?P<v>[\d.]+) ms", "latency_avg_ms", float),
    (r"^latency stddev = (?P<v>[\d.]+) ms", "latency_stddev_ms", float),
    (r"^initial connection time = (?P<v>[\d.]+) ms", "initial_connection_ms", float),
    (r"^tps = (?P<v>[\d.]+) \((?:without initial connection time|excluding connections establishing)\)", "tps", float),
    (r"^tps = (?P<v>[\d.]+) \(including connections establishing\)", "tps_including_connections", float),
]


def parse_summary(text: str) -> Summary:
    """Parse pgbench's summary (stdout) of any version from 9.2 to 18."""
    values: dict = {}
    statements: list[StatementLatency] = []
    scripts: list[dict] = []
    script_index = 0
    in_statements = False
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        processed = re.match(r"^(?:- )?number of transactions actually processed: (\d+)(?:/(\d+))?(?: \(tps = ([\d.]+)\))?", line)
        if processed:
            if raw.startswith(" -"):
                scripts[-1]["transactions"] = int(processed.group(1))
                if processed.group(3):
                    scripts[-1]["tps"] = float(processed.group(3))
            else:
                values["transactions"] = int(processed.group(1))
                if processed.group(2):
                    values["transactions_planned"] = int(processed.group(2))
            continue
        script_header = re.match(r"^SQL script (\d+): (.+)$", line)
        if script_header:
            script_index = int(script_header.group(1))
            scripts.append({"script": script_index, "name": script_header.group(2)})
            in_statements = False
            continue
        if raw.startswith(" -") and scripts:
            _script_detail(scripts[-1], line)
            if "statement latencies" in line:
                in_statements = True
            continue
        if line.startswith("statement latencies"):
            in_statements = True
            continue
        if in_statements:
            statement = _statement(line, script_index)
            if statement:
                statements.append(statement)
                continue
            in_statements = False
        for pattern, key, kind in _SUMMARY_FIELDS:
            match = re.match(pattern, line)
            if match:
                values[key] = kind(match["v"].strip())
                break
    return Summary(**values, statements=tuple(statements), scripts=tuple(scripts))


def _script_detail(script: dict, line: str) -> None:
    weight = re.match(r"- weight: (\d+)", line)
    if weight:
        script["weight"] = int(weight.group(1))
    count = re.match(r"- (\d+) transactions \([\d.]+% of total(?:, tps = ([\d.]+))?\)", line)
    if count:
        script["transactions"] = int(count.group(1))
        if count.group(2):
            script["tps"] = float(count.group(2))
    for key, pattern in (
        ("failed", r"- number of failed transactions: (\d+)"),
        ("latency_avg_ms", r"- latency average = ([\d.]+) ms"),
        ("latency_stddev_ms", r"- latency stddev = ([\d.]+) ms"),
    ):
        match = re.match(pattern, line)
        if match:
            script[key] = float(match.group(1)) if "." in match.group(1) else int(match.group(1))


def _statement(line: str, script: int) -> StatementLatency | None:
    match = re.match(r"^([\d.]+)\s+(?:(\d+)\s+)?(?:(\d+)\s+)?(\S.*)$", line)
    if not match:
        return None
    return StatementLatency(
        script=script,
        latency_ms=float(match.group(1)),
        failures=int(match.group(2)) if match.group(2) else None,
        retries=int(match.group(3)) if match.group(3) else None,
        command=match.group(4).strip(),
    )


# ----------------------------------------------------------------------------- errors


@dataclass(frozen=True)
class Problems:
    """What went wrong, from pgbench's stderr."""

    errors: tuple[str, ...] = ()
    aborted_clients: int = 0
    run_aborted: bool = False


def parse_errors(stderr: str) -> Problems:
    """Collect ``pgbench: error:`` lines (with their continuation lines) and aborted clients."""
    errors: list[str] = []
    aborted = 0
    run_aborted = False
    for line in stderr.splitlines():
        if line.startswith("progress:"):
            continue
        # pgbench's threads write their prefixes and messages in pieces, so two clients' errors can
        # interleave ("pgbench:pgbench: error:  error: client 1 ...", then "client 0 ..." alone).
        if re.match(r"^(.*pgbench: ?|client \d+ (script \d+ )?aborted)", line):
            message = re.sub(r"^.*?pgbench:(\s*(pgbench:|error:))*\s*", "", line)
            if "Run was aborted" in message:
                run_aborted = True
                continue
            if re.match(r"client \d+ (script \d+ )?aborted", message):
                aborted += 1
                message = re.sub(r"^client \d+ (script \d+ )?aborted in command \d+( query \d+)?: ", "", message)
            errors.append(message)
        elif errors and line.strip() and not line.startswith("pgbench"):
            errors[-1] = f"{errors[-1]}\n{line}"
    if run_aborted:
        # pgbench 18 ends a client on a failed \gset (or meta-command) with only its error line
        # ("client 0 script 0 command 1 query 0: expected one row, got 0") and "Run was aborted"
        named = {match.group(1) for message in errors if (match := re.match(r"client (\d+) ", message))}
        aborted = max(aborted, len(named))
    return Problems(tuple(dict.fromkeys(errors)), aborted, run_aborted)  # each message once


# ----------------------------------------------------------------------------- transaction log


LOG_COLUMNS = ["client", "number", "latency_us", "script", "epoch", "micro", "lag_us", "retries"]


def log_frame(source):
    """Pgbench's ``-l`` log (a path, a file object or text) as a DataFrame.

    Columns: ``end_s`` (Unix time the transaction ended), ``latency_ms`` (NaN when it
    failed or was skipped), ``status`` (ok, failed, skipped), ``script``, ``retries``.
    pandas reads millions of lines in seconds, which article-sized runs need.
    """
    import io

    import pandas as pd

    if isinstance(source, str) and "\n" in source:
        source = io.StringIO(source)
    # 6 fields, 7 with --max-tries (retries), 8 with --rate (schedule lag): missing ones read as NaN.
    raw = pd.read_csv(source, sep=" ", header=None, names=LOG_COLUMNS, dtype=str, on_bad_lines="skip", engine="c")
    if raw.empty:
        return pd.DataFrame(columns=["end_s", "latency_ms", "status", "script", "client"])
    latency = pd.to_numeric(raw["latency_us"], errors="coerce")
    status = raw["latency_us"].where(latency.isna(), "ok")
    frame = pd.DataFrame({
        "end_s": pd.to_numeric(raw["epoch"], errors="coerce") + pd.to_numeric(raw["micro"], errors="coerce") / 1e6,
        "latency_ms": latency / 1000,
        "status": status,
        "script": pd.to_numeric(raw["script"], errors="coerce"),
        "client": pd.to_numeric(raw["client"], errors="coerce"),
    })
    # an interrupted pgbench can leave its last line cut short: a transaction without its end time is dropped
    return frame.dropna(subset=["end_s", "client"]).reset_index(drop=True)


@dataclass(frozen=True)
class Bin:
    t: float  # seconds since the run started, at the end of the bin
    tps: float
    failed: int
    p99_ms: float | None
    max_ms: float | None


def log_start(frame) -> float | None:
    """When the first logged transaction began (Unix time): the log's time zero."""
    if frame.empty:
        return None
    ok = frame.dropna(subset=["latency_ms"])
    if ok.empty:
        return float(frame["end_s"].min())
    return float((ok["end_s"] - ok["latency_ms"] / 1000).min())


def bin_log(frame, start_s: float, width_s: float = 0.1, *, sampling_rate: float = 1.0,
            end_s: float | None = None) -> list[Bin]:
    """Transactions per second in bins of ``width_s`` seconds (empty bins included).

    >>> import pandas as pd
    >>> f = pd.DataFrame({"end_s": [100.005 + i * 0.01 for i in range(20)], "latency_ms": [1.0] * 20,
    ...                   "status": ["ok"] * 20})
    >>> [round(b.tps) for b in bin_log(f, 100.0, 0.1)]
    [100, 100]
    """
    import numpy as np

    if frame.empty:
        return []
    last = end_s if end_s is not None else float(frame["end_s"].max())
    count = max(1, math.ceil((last - start_s) / width_s - 1e-9))
    index = np.floor((frame["end_s"].to_numpy() - start_s) / width_s).astype(int)
    inside = (index >= 0) & (index < count)
    status = frame["status"].to_numpy()
    ok = (status == "ok") & inside
    failed = failed_mask(frame) & inside
    ok_counts = np.bincount(index[ok], minlength=count)
    failed_counts = np.bincount(index[failed], minlength=count)
    latency = frame["latency_ms"].to_numpy()
    groups: dict[int, np.ndarray] = {}
    if ok.any():
        order = np.argsort(index[ok], kind="stable")
        keys, starts = np.unique(index[ok][order], return_index=True)
        for key, values in zip(keys, np.split(latency[ok][order], starts[1:])):
            groups[int(key)] = np.sort(values)
    bins = []
    for i in range(count):
        sorted_values = groups.get(i)
        bins.append(Bin(
            t=round((i + 1) * width_s, 6),
            tps=float(ok_counts[i]) / width_s / sampling_rate,
            failed=round(int(failed_counts[i]) / sampling_rate),
            p99_ms=float(percentile(sorted_values, 99)) if sorted_values is not None else None,
            max_ms=float(sorted_values[-1]) if sorted_values is not None else None,
        ))
    return bins


def failed_mask(frame):
    """Which logged transactions failed: ``failed``, or the kind ``--failures-detailed`` writes instead.

    With ``--failures-detailed`` pgbench 18 logs ``serialization`` or ``deadlock`` where it
    otherwise logs ``failed`` (``doLog`` in pgbench.c); ``skipped`` (``-L``) is not a failure.

    >>> import pandas as pd
    >>> failed_mask(pd.DataFrame({"status": ["ok", "failed", "serialization", "deadlock", "skipped"]})).tolist()
    [False, True, True, True, False]
    """
    status = frame["status"].to_numpy()
    return (status != "ok") & (status != "skipped")


def client_ends(frame, zero_s: float) -> dict[int, float]:
    """Each client's last logged transaction end, in seconds from ``zero_s`` (a Unix time)."""
    if frame.empty or "client" not in frame:
        return {}
    ends = frame.groupby("client")["end_s"].max() - zero_s
    return {int(client): round(float(end), 6) for client, end in ends.items()}


def client_counts(frame) -> dict[int, int]:
    """How many transactions each client logged (successful or not)."""
    if frame.empty or "client" not in frame:
        return {}
    return {int(client): int(count) for client, count in frame.groupby("client").size().items()}


def window_figures(frame, from_s: float, to_s: float, *, sampling_rate: float = 1.0) -> dict:
    """Transactions, tps, failures and latencies of the logged transactions that ended in ``(from_s, to_s]``.

    Times are Unix times; a sampled log (``--sampling-rate``) is scaled back to all transactions.

    >>> import pandas as pd
    >>> f = pd.DataFrame({"end_s": [10.5, 11.2, 11.9, 12.5], "latency_ms": [1.0, 2.0, None, 4.0],
    ...                   "status": ["ok", "ok", "failed", "ok"]})
    >>> figures = window_figures(f, 11.0, 12.0)
    >>> figures["transactions"], figures["tps"], figures["failures"], figures["latency_ms"]["max"]
    (1, 1.0, 1, 2.0)
    """
    seconds = to_s - from_s
    end = frame["end_s"].to_numpy()
    inside = (end > from_s) & (end <= to_s)
    window = frame[inside]
    ok = window[window["status"].to_numpy() == "ok"]
    transactions = round(len(ok) / sampling_rate)
    return {
        "seconds": round(seconds, 3),
        "transactions": transactions,
        "tps": round(len(ok) / sampling_rate / seconds, 3) if seconds > 0 else None,
        "failures": round(int(failed_mask(window).sum()) / sampling_rate),
        "latency_ms": latency_figures(ok),
        "source": "transaction log" + (f" (sampled at {sampling_rate:g})" if sampling_rate != 1 else ""),
    }


def percentile(sorted_values, q: float) -> float:
    """The q-th percentile (nearest rank) of already sorted values.

    >>> percentile([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 95)
    10
    """
    if len(sorted_values) == 0:
        raise ValueError("no values")
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


def latency_figures(frame) -> dict[str, float]:
    """avg, stddev, p50, p95, p99 and max latency (ms) of the successful transactions."""
    import numpy as np

    values = np.sort(frame["latency_ms"].dropna().to_numpy())
    if len(values) == 0:
        return {}
    return {
        "avg": float(values.mean()),
        "stddev": float(values.std()),
        "p50": float(percentile(values, 50)),
        "p95": float(percentile(values, 95)),
        "p99": float(percentile(values, 99)),
        "max": float(values[-1]),
    }


# ----------------------------------------------------------------------------- stalls


@dataclass(frozen=True)
class Stall:
    start: float
    end: float


def find_stalls(points: list[tuple[float, float]], *, fraction: float = 0.1, width: float = 1.0) -> list[Stall]:
    """Intervals whose throughput is below ``fraction`` of the run's median.

    ``points`` are (end of interval, tps). The median is taken over the intervals that
    made progress, so a run that is stalled most of the time still shows its stalls
    (and a run with no progress at all is one long stall). Adjacent intervals merge.

    >>> find_stalls([(1, 100), (2, 0), (3, 5), (4, 100), (5, 98)])
    [Stall(start=1.0, end=3)]
    >>> find_stalls([(1, 0), (2, 0), (3, 900)])
    [Stall(start=0.0, end=2)]
    """
    if not points:
        return []
    moving = [tps for _, tps in points if tps > 0]
    median = statistics.median(moving) if moving else float("inf")
    stalls: list[Stall] = []
    for end, tps in points:
        if tps < fraction * median:
            start = end - width
            if stalls and abs(stalls[-1].end - start) < 1e-9:
                stalls[-1] = replace(stalls[-1], end=end)
            else:
                stalls.append(Stall(start, end))
    return stalls


__all__ = [
    "Bin", "Problems", "Progress", "Script", "Spec", "Stall", "StatementLatency", "Summary",
    "bin_log", "build_argv", "check_capacity", "client_counts", "client_ends", "failed_mask", "find_stalls", "latency_figures",
    "log_frame", "log_start", "window_figures",
    "parse_errors", "parse_options", "parse_progress", "parse_summary", "percentile", "split_options",
]
