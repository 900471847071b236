"""The command line: ``python -m labkit doctor|server|pgbench|run|pictures|binder``."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from . import config
from .errors import LabkitError, connection_problem


def doctor(_args) -> int:
    """What labkit finds on this machine."""
    from .backend import server_for_backend
    from .binaries import program, wheel_bin_dir
    from .limits import file_limit, problems
    from .perf import availability, dwarf_works
    from .profiles import advise, current, default_name

    rows = []
    try:
        bin_dir = wheel_bin_dir()
        version = subprocess.run([str(program("pgbench", bin_dir)), "--version"], capture_output=True, text=True,
                                 encoding="utf-8", errors="replace").stdout.strip()
        rows.append(("embedded PostgreSQL", f"{bin_dir} ({version})"))
    except LabkitError as error:
        rows.append(("embedded PostgreSQL", f"missing: {error.short}"))
    system = shutil.which("postgres") or shutil.which("pg_ctl")
    if system:
        rows.append(("system PostgreSQL", f"{system} (found, not used: labkit runs its own)"))
    rows.append(("backend", config.backend() + (" (LABKIT_DSN)" if os.environ.get("LABKIT_DSN") else "")))
    if config.backend() == "external":
        rows.append(("server", _external_state()))
    elif config.backend() == "embedded":
        embedded = server_for_backend()
        status = embedded.status()
        rows.append(("server home", str(config.home())))
        rows.append(("server", ("running, " if status.running else "stopped; when running, ") + "listens on "
                     + (status.listens or "?")))
        failed = None if status.running else getattr(embedded, "last_start_failure", lambda: None)()
        if failed:
            rows.append(("last start", f"failed: {failed}"))
    rows.append(("results", str(config.results_dir())))
    profile = current()
    source = {"LABKIT_PROFILE": "from LABKIT_PROFILE", "Binder": "on Binder", "default": "the default"}[default_name()[1]]
    rows.append(("profile", f"{profile.name} ({source}). {advise()}"))
    limit = file_limit()
    rows.append(("open files", "no per-process limit (Windows)" if limit is None else f"{limit[0]} (hard limit {limit[1]})"))
    for problem in problems(profile):
        rows.append(("limit", problem))
    rows.append(("perf", availability().message))
    if availability().available:
        rows.append(("perf call chains", "DWARF unwinding works (--call-graph dwarf)" if dwarf_works()
                     else "no DWARF unwinding in this perf: self time per symbol only"))
    rows.append(("docker engine", _docker_state()))
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name.ljust(width)}  {value}")
    return 0


def _external_state() -> str:
    import psycopg

    from . import db
    from .external import from_environment

    target = from_environment()
    try:
        with db.connect(target.conninfo(), timeout_s=3) as connection:
            version = db.one(connection, "show server_version")
    except psycopg.Error as error:
        return f"{target.where()} (LABKIT_DSN) does not answer: {connection_problem(error)[:200]}"
    return f"{target.where()} (LABKIT_DSN) answers: PostgreSQL {version}"


def _docker_state() -> str:
    from .docker_backend import engine_problem

    problem = engine_problem()
    return "answers" if problem is None else f"not available ({problem})"


def server(args) -> int:
    from .backend import server_for_backend
    from .profiles import current

    target = server_for_backend()
    from .embedded import EmbeddedServer

    if target.kind == "docker":
        raise LabkitError("With LABKIT_BACKEND=docker, the container lives as long as the Python process that "
                          "started it: start it from a notebook with labkit.start(), or use "
                          "docker/compose.yaml for a server that stays up.")
    if target.kind == "external":
        raise LabkitError("With LABKIT_DSN, labkit starts and stops nothing: `python -m labkit doctor` says "
                          "whether that server answers.")
    assert isinstance(target, EmbeddedServer)  # docker and external are refused above
    if args.action == "start":
        started = target.start(current(), watch=False)
        target.pin(True)
        print("started" if started else "already running")
    elif args.action == "reset-settings":
        removed = target.reset_settings(current())
        print(("removed " + ", ".join(f"{name} = {value}" for name, value in removed.items())
               + f" (a copy is in {target.log_dir}); ") if removed else "no setting made with lab.set; ", end="")
        print("the server runs")
    elif args.action == "stop":
        target.pin(False)
        print("stopped" if target.stop() else "not running")
        return 0
    for line in target.status().lines():
        print(line)
    return 0


def pgbench_command(args, extra: list[str]) -> int:
    from . import pgbench
    from .lab import start
    from .live import Printer
    from .probes import WAIT_EVENTS
    from .profiles import current

    spec = pgbench.parse_options(extra, name=args.name, defaults=current().run_defaults())
    lab = start(args.notebook)
    try:
        run = lab.run_spec(spec, probes=[] if args.no_probes else [WAIT_EVENTS], live=False, observer=Printer())
    finally:
        lab.close()
    print("  ".join(f"{key}={value}" for key, value in run.summary().items()))
    if args.json:
        Path(args.json).write_text(json.dumps(run.to_dict(), indent=1, default=str, ensure_ascii=False),
                                   encoding="utf-8")
        print(f"record: {args.json} (also saved as {run.path})")
    else:
        print(f"record: {run.path}")
    return 0


def run_notebooks(args) -> int:
    from .notebooks import execute

    paths = sorted(Path("notebooks").glob("[0-9][0-9]-*.ipynb")) if args.all else [Path(p) for p in args.notebook]
    if not paths:
        raise LabkitError("No notebook given: name one, or use --all from the project's folder.")
    failed = 0
    for path in paths:
        result = execute(path, profile=args.profile, output_dir=Path(args.output), html=not args.no_html)
        print(result.line(), flush=True)
        failed += result.error is not None
    return 1 if failed else 0


def binder_command(args) -> int:
    from . import binder

    remote = args.remote or binder.origin()
    url = binder.link(remote, ref=args.ref)
    line = binder.badge(url)
    print(url)
    print(line)
    if args.readme:
        readme = Path(args.readme)
        changed = binder.write_badge(readme, line)
        print(f"{readme}: {'badge written' if changed else 'badge already there'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    for stream in (sys.stdout, sys.stderr):  # a path the console's code page cannot write must not stop the CLI
        if isinstance(stream, io.TextIOWrapper):  # not so when a test or IDE has replaced it
            with contextlib.suppress(ValueError):
                stream.reconfigure(errors="backslashreplace")
    parser = argparse.ArgumentParser(prog="python -m labkit", description="PostgreSQL Concurrency Labs")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("doctor", help="what labkit finds on this machine")
    server_parser = commands.add_parser("server", help="start, stop or show the embedded server")
    server_parser.add_argument("action", choices=["start", "stop", "status", "reset-settings"],
                               help="reset-settings: remove the settings made with lab.set (a copy is kept) and start "
                                    "the server, which one of them kept from starting")
    bench = commands.add_parser("pgbench", help="a pgbench run through labkit (other options go to pgbench)")
    bench.epilog = "Example: python -m labkit pgbench -c 8 -T 10 -f script.sql --name try"
    bench.add_argument("--json", help="also write the run record here")
    bench.add_argument("--name", default="cli", help="the run's name")
    bench.add_argument("--notebook", default="cli", help="whose database and records (default: cli)")
    bench.add_argument("--no-probes", action="store_true", help="do not sample wait events")
    runner = commands.add_parser("execute", help="execute lab notebooks headless and save executed copies")
    runner.add_argument("notebook", nargs="*")
    runner.add_argument("--all", action="store_true", help="every notebooks/NN-*.ipynb")
    runner.add_argument("--profile", default=None, help="ci, laptop or article (default: LABKIT_PROFILE)")
    runner.add_argument("--output", default="executed", help="folder for the executed copies")
    runner.add_argument("--no-html", action="store_true", help="keep only the .ipynb copy")
    pictures = commands.add_parser("pictures", help="PNGs of each lab's key chart from its run records")
    pictures.add_argument("--profile", default="laptop", help="whose records (default: laptop)")
    pictures.add_argument("--output", default="notebooks/pictures", help="folder for the PNGs")
    binder_parser = commands.add_parser("binder", help="the Binder link and README badge of a public copy of the labs")
    binder_parser.add_argument("remote", nargs="?", help="the repository's public address (default: git's origin)")
    binder_parser.add_argument("--ref", default="HEAD", help="branch, tag or commit to build (default: HEAD)")
    binder_parser.add_argument("--readme", nargs="?", const="README.md", default=None,
                               help="also write the badge between the README's badge markers")
    args, extra = parser.parse_known_args(argv)
    if extra and args.command != "pgbench":
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        if args.command == "doctor":
            return doctor(args)
        if args.command == "server":
            return server(args)
        if args.command == "pgbench":
            return pgbench_command(args, extra)
        if args.command == "binder":
            return binder_command(args)
        if args.command == "pictures":
            from .pictures import write_all

            for line in write_all(Path(args.output), profile=args.profile):
                print(line)
            return 0
        return run_notebooks(args)
    except LabkitError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
