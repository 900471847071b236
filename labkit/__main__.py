"""The command line: ``python -m labkit doctor|server|pgbench|run|pictures|binder``."""

from __future__ import annotations

import argparse
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
    from .perf import availability, dwarf_works
    from .profiles import advise, current, default_name
    from .server import EmbeddedServer, wheel_bin_dir

    rows = []
    try:
        bin_dir = wheel_bin_dir()
        version = subprocess.run([str(bin_dir / "pgbench"), "--version"], capture_output=True, text=True).stdout.strip()
        rows.append(("embedded PostgreSQL", f"{bin_dir} ({version})"))
    except LabkitError as error:
        rows.append(("embedded PostgreSQL", f"missing: {error.short}"))
    system = shutil.which("postgres") or shutil.which("pg_ctl") or next(iter(sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"))), None)
    if system:
        rows.append(("system PostgreSQL", f"{system} (found, not used: labkit runs its own)"))
    rows.append(("backend", config.backend() + (" (LABKIT_DSN)" if os.environ.get("LABKIT_DSN") else "")))
    if config.backend() == "external":
        rows.append(("server", _external_state()))
    else:
        server = EmbeddedServer()
        rows.append(("server home", str(server.home)))
        rows.append(("server", "running" if server.running() else "stopped"))
    rows.append(("results", str(config.results_dir())))
    source = {"LABKIT_PROFILE": "from LABKIT_PROFILE", "Binder": "on Binder", "default": "the default"}[default_name()[1]]
    rows.append(("profile", f"{current().name} ({source}). {advise()}"))
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

    from .server import server_for_backend

    target = server_for_backend()
    where = f"{target.params.get('host', 'local socket')}:{target.params.get('port', '5432')}"
    try:
        with psycopg.connect(target.dsn(), connect_timeout=3) as connection:
            version = connection.execute("show server_version").fetchone()[0]
    except psycopg.Error as error:
        return f"{where} (LABKIT_DSN) does not answer: {connection_problem(error)[:200]}"
    return f"{where} (LABKIT_DSN) answers: PostgreSQL {version}"


def _docker_state() -> str:
    from .docker_backend import engine_problem

    problem = engine_problem()
    return "answers" if problem is None else f"not available ({problem})"


def server(args) -> int:
    from .profiles import current
    from .server import server_for_backend

    target = server_for_backend()
    if target.kind == "docker":
        raise LabkitError("With LABKIT_BACKEND=docker, the container lives as long as the Python process that "
                          "started it: start it from a notebook with labkit.start(), or use "
                          "docker/compose.yaml for a server that stays up.")
    if args.action == "start":
        started = target.start(current(), watch=False)
        if hasattr(target, "pin"):
            target.pin(True)
        print("started" if started else "already running")
    elif args.action == "stop":
        if hasattr(target, "pin"):
            target.pin(False)
        print("stopped" if target.stop() else "not running")
        return 0
    for line in target.status().lines():
        print(line)
    return 0


def pgbench_command(args, extra: list[str]) -> int:
    from . import pgbench
    from .lab import start

    spec = pgbench.parse_options(extra + ["--name", args.name])
    lab = start(args.notebook)
    run = lab.runner().run(spec, probes=[] if args.no_probes else _default_probes(), echo=print)
    summary = run.summary()
    print("  ".join(f"{key}={value}" for key, value in summary.items()))
    if args.json:
        Path(args.json).write_text(json.dumps(run.to_dict(), indent=1, default=str))
        print(f"record: {args.json} (also saved as {run.path})")
    else:
        print(f"record: {run.path}")
    lab.close()
    return 0


def _default_probes():
    from .probes import WAIT_EVENTS

    return [WAIT_EVENTS]


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
    parser = argparse.ArgumentParser(prog="python -m labkit", description="PostgreSQL Concurrency Labs")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("doctor", help="what labkit finds on this machine")
    server_parser = commands.add_parser("server", help="start, stop or show the embedded server")
    server_parser.add_argument("action", choices=["start", "stop", "status"])
    bench = commands.add_parser("pgbench", help="a pgbench run through labkit (other options go to pgbench)")
    bench.add_argument("--json", help="also write the run record here")
    bench.add_argument("--name", default="cli", help="the run's name")
    bench.add_argument("--notebook", default="cli", help="whose database and records (default: cli)")
    bench.add_argument("--no-probes", action="store_true", help="do not sample wait events")
    runner = commands.add_parser("run", help="execute lab notebooks headless and save executed copies")
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
