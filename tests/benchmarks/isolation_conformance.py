"""PostgreSQL's whole isolation schedule through labkit.interleave, each spec compared with its expected files.

    python tests/benchmarks/isolation_conformance.py SRC/test/isolation [--mode lab|regress] [--only SPEC ...]

``SRC/test/isolation`` is that folder of PostgreSQL 18's source (``isolation_schedule``,
``specs/``, ``expected/``). The specs run in schedule order, on a server of their own (a private
``LABKIT_HOME``, removed afterwards) set up as the suite's installcheck asks
(``max_prepared_transactions``), and each output is compared exactly with ``expected/NAME.out``
and its alternatives (``NAME_1.out``, ...), as pg_regress compares them.

``--mode lab`` (the default) runs each spec as a notebook would: in a lab database, through
labkit's named sessions, with the server's own settings. A spec that differs is run again with
one part of pg_regress's environment at a time (``labkit.interleave.REGRESS_PARTS``, and its
``isolation_regression`` database); the part that makes it identical is the reason printed.
``--mode regress`` runs every spec in pg_regress's whole environment. A spec that still differs
is run once more (a timing difference shows as identical then) and through the wheel's own
``isolationtester`` in the same environment: when the engine prints what the tester prints, the
difference is this server's, not the engine's.

Each spec's status is printed as it ends, then a summary; the exit status is 1 if any spec
differs for a reason that is not the environment's.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
import time
from pathlib import Path

from private_home import private_home

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests import isolationtester  # noqa: E402 - the checkout's own, after its root is on the path

REGRESS_DATABASE = "isolation_regression"
DATABASE_REASON = "the database is pg_regress's isolation_regression (its name, lc_* C, bytea_output hex)"


def schedule(folder: Path) -> list[str]:
    """The spec names of ``isolation_schedule``, in order."""
    names = []
    for line in (folder / "isolation_schedule").read_text(encoding="utf-8").splitlines():
        words = line.split()
        if words[:1] == ["test:"]:
            names += words[1:]
    return names


def expected(folder: Path, name: str) -> list[str]:
    """The expected outputs of a spec: NAME.out and its alternatives NAME_N.out."""
    found = sorted(folder.glob(f"expected/{name}.out")) + sorted(
        path for path in folder.glob(f"expected/{name}_*.out") if re.fullmatch(rf"{re.escape(name)}_\d+\.out", path.name))
    return [path.read_text(encoding="utf-8") for path in found]


def regress_lab(lab):
    """A Lab on pg_regress's database (made as pg_regress makes it), on the same server."""
    from psycopg import sql as pgsql

    from labkit import db
    from labkit.lab import Lab

    with db.connect(lab.server.admin_conninfo()) as connection:
        connection.execute(pgsql.SQL("drop database if exists {} with (force)").format(pgsql.Identifier(REGRESS_DATABASE)))
        connection.execute(pgsql.SQL("create database {} template template0").format(pgsql.Identifier(REGRESS_DATABASE)))
        for name, value in (("lc_messages", "C"), ("lc_monetary", "C"), ("lc_numeric", "C"), ("lc_time", "C"),
                            ("bytea_output", "hex"), ("timezone_abbreviations", "Default")):
            connection.execute(pgsql.SQL("alter database {} set {} to {}").format(
                pgsql.Identifier(REGRESS_DATABASE), pgsql.Identifier(name), pgsql.Literal(value)))
    other = Lab(lab.server, REGRESS_DATABASE, lab.profile, messages=[])
    other.database = REGRESS_DATABASE
    return other


def engine_text(lab, name: str, text: str, parts: tuple[str, ...], timeout_s: float) -> str:
    from labkit import interleave

    environment = interleave.regress(name, parts) if parts else None
    return interleave.run(lab, text, environment=environment, step_timeout_s=timeout_s).text


def differs(outputs: list[str], got: str) -> list[str]:
    """The diff from the closest expected output (empty: identical to one of them)."""
    if got in outputs:
        return []
    closest = min(outputs, key=lambda want: sum(1 for line in difflib.ndiff(want.splitlines(), got.splitlines())
                                                  if line[:1] in "+-"))
    return list(difflib.unified_diff(closest.splitlines(True), got.splitlines(True), "expected", "engine", n=1))


def judge_lab(labs, name: str, text: str, outputs: list[str], timeout_s: float) -> tuple[str, list[str]]:
    """lab mode: identical, or the one part of pg_regress's environment that makes it identical."""
    from labkit import interleave

    lab, regress = labs
    diff = differs(outputs, engine_text(lab, name, text, (), timeout_s))
    if not diff:
        return "identical", []
    for part in interleave.REGRESS_PARTS:
        if not differs(outputs, engine_text(lab, name, text, (part,), timeout_s)):
            return f"environment: {interleave.REGRESS_REASONS[part]}", diff
    if not differs(outputs, engine_text(regress, name, text, (), timeout_s)):
        return f"environment: {DATABASE_REASON}", diff
    if not differs(outputs, engine_text(regress, name, text, interleave.REGRESS_PARTS, timeout_s)):
        return "environment: pg_regress's (several parts together)", diff
    return judge_regress(labs, name, text, outputs, timeout_s)


def judge_regress(labs, name: str, text: str, outputs: list[str], timeout_s: float) -> tuple[str, list[str]]:
    """regress mode: identical, identical on a second run, as the real isolationtester prints here, or differs."""
    from labkit import interleave

    regress = labs[1]
    got = engine_text(regress, name, text, interleave.REGRESS_PARTS, timeout_s)
    diff = differs(outputs, got)
    if not diff:
        return "identical in pg_regress's environment", []
    if not differs(outputs, engine_text(regress, name, text, interleave.REGRESS_PARTS, timeout_s)):
        return "identical on a second run (timing)", diff
    tester = isolationtester.run(regress, name, text, timeout_s)
    if tester == got:
        return "environment: this server (the wheel's isolationtester prints the same)", diff
    return "DIFFERS", diff


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="src/test/isolation of PostgreSQL 18's source")
    parser.add_argument("--mode", choices=("lab", "regress"), default="lab")
    parser.add_argument("--only", nargs="*", default=None, help="these specs only")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds before a step is cancelled")
    parser.add_argument("--diffs", action="store_true", help="print the diff of each spec that is not identical")
    args = parser.parse_args()
    names = schedule(args.folder)
    if args.only:
        names = [name for name in names if name in args.only]
    with private_home(idle_stop_s=600):
        import labkit

        lab = labkit.start("isolation-conformance", fresh=True)
        lab.set(max_prepared_transactions=10)  # the suite's installcheck needs it (prepared-transactions)
        labs = (lab, regress_lab(lab))
        judge = judge_lab if args.mode == "lab" else judge_regress
        statuses: dict[str, str] = {}
        started = time.monotonic()
        for name in names:
            text = (args.folder / "specs" / f"{name}.spec").read_text(encoding="utf-8")
            began = time.monotonic()
            try:
                status, diff = judge(labs, name, text, expected(args.folder, name), args.timeout)
            except Exception as error:  # noqa: BLE001 - one spec's failure is its status, the others go on
                status, diff = f"DIFFERS (raised {type(error).__name__}: {error})", []
            statuses[name] = status
            print(f"{name:45} {time.monotonic() - began:6.1f} s  {status}", flush=True)
            if args.diffs and diff:
                sys.stdout.writelines("    " + line for line in diff[:60])
        lab.close()
    counts: dict[str, int] = {}
    for status in statuses.values():
        counts[status] = counts.get(status, 0) + 1
    print(f"\n{len(statuses)} specs in {time.monotonic() - started:.0f} s, mode {args.mode}:")
    for status, count in sorted(counts.items(), key=lambda item: -item[1]):
        print(f"  {count:4}  {status}")
        if not status.startswith("identical"):
            print("        " + ", ".join(name for name, seen in statuses.items() if seen == status))
    return 1 if any(status.startswith("DIFFERS") for status in statuses.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
