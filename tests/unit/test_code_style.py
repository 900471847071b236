"""Habits the project keeps: ruff, mypy and vulture find nothing; one module connects; notebooks carry no outputs."""

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def tool(*argv: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """A checker from the test extra (pip install -e '.[test]'), run as a module of this Python."""
    return subprocess.run([sys.executable, "-m", *argv], cwd=cwd, capture_output=True, encoding="utf-8",
                          errors="replace")


def test_ruff_finds_nothing():
    result = tool("ruff", "check", "labkit", "tests")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("platform", ["linux", "darwin", "win32"])
def test_mypy_finds_nothing(platform):
    """The annotations hold, as each OS's standard library has them (the settings are in pyproject.toml)."""
    result = tool("mypy", "--platform", platform, "--no-error-summary")
    assert result.returncode == 0, result.stdout + result.stderr


def notebook_code(path: Path) -> str:
    """A lab's Python (cell magics' bodies are SQL and pgbench scripts: left out; line magics: a pass)."""
    notebook = json.loads(path.read_text(encoding="utf-8"))
    lines = []
    for cell in notebook["cells"]:
        text = "".join(cell["source"])
        if cell["cell_type"] != "code" or text.startswith("%%"):
            continue
        lines += ["pass" if line.lstrip().startswith(("%", "!")) else line for line in text.splitlines()]
    return "\n".join(lines) + "\n"


# Names vulture cannot see used (it reads attribute names only), each with who uses it.
USED_ELSEWHERE = """
# ctypes structure fields, set for Windows' kernel32 (labkit/_windows.py)
_.LimitFlags  # noqa


# plotly layout properties, read by plotly
_.legend  # noqa
_.uirevision  # noqa
_.shapes  # noqa
_.showlegend  # noqa

# traitlets synced to the browser (labkit/js/live_figure.js reads role)
_.role  # noqa

# shlex option; IPython display hooks; ipywidgets property
_.whitespace_split  # noqa
_._repr_html_  # noqa
_.disabled  # noqa

# fields of parsed pgbench output, kept in each run record through vars() (records hold them as dict keys)
_.stddev_ms  # noqa
_.lag_ms  # noqa
_.skipped  # noqa
_.transaction_type  # noqa
_.transactions_per_client  # noqa
_.transactions_planned  # noqa
_.tps_including_connections  # noqa
_.p99_ms  # noqa
_.max_ms  # noqa

# started by name in a child Python (labkit.processes.spawn_detached's launcher)
_popen_detached  # noqa

# logging.FileHandler's hook, called by the handler itself to open its file (labkit/watchdog.py)
_._open  # noqa
"""


def test_no_dead_code(tmp_path):
    """vulture over labkit and the labs' code: a name nothing uses is deleted, or listed with its user above."""
    labs = tmp_path / "labs"
    labs.mkdir()
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        (labs / (path.stem.replace("-", "_") + ".py")).write_text(notebook_code(path), encoding="utf-8")
    (tmp_path / "used_elsewhere.py").write_text(USED_ELSEWHERE, encoding="utf-8")
    hub = str(ROOT / "docker" / "hub" / "jupyterhub_config.py")  # uses labkit.profiles.for_class
    result = tool("vulture", "labkit", str(labs), hub, str(tmp_path / "used_elsewhere.py"), "--min-confidence", "60")
    unused = [line for line in result.stdout.splitlines() if line.startswith("labkit")]
    assert result.returncode in (0, 3) and not result.stderr.strip(), result.stderr  # 3: something unused
    assert unused == []


# What opens a connection, by its full dotted name once a module's imports are resolved: a driver's
# connect (psycopg.connect, psycopg.Connection.connect, psycopg.AsyncConnection.connect, ...), an
# SQLAlchemy engine (it connects whenever it is used), a connection pool.
DRIVERS = ("psycopg", "psycopg2", "asyncpg", "pg8000")
ENGINES = ("sqlalchemy.create_engine", "sqlalchemy.engine.create_engine", "sqlalchemy.create_mock_engine",
           "sqlalchemy.engine_from_config", "sqlalchemy.ext.asyncio.create_async_engine")


def opens_a_connection(name: str) -> bool:
    last = name.rsplit(".", 1)[-1]
    return ((name.split(".")[0] in DRIVERS and last == "connect") or name in ENGINES
            or (name.startswith("psycopg_pool.") and last.endswith("Pool")))


def connecting_names(source: str) -> list[str]:
    """Each use of something that opens a connection in ``source``, as ``line: full.name``.

    Names are resolved through the module's imports (``import psycopg as pg``, ``from psycopg
    import connect, Connection``), so any spelling counts; a use that is not a call (a function
    handed on, ``creator=psycopg.connect``) counts too.
    """
    tree = ast.parse(source)
    imported: dict[str, str] = {}  # a name bound by an import -> the dotted name it stands for
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    imported[alias.asname] = alias.name
                else:  # import psycopg.conninfo binds psycopg
                    imported[alias.name.split(".")[0]] = alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                imported[alias.asname or alias.name] = f"{node.module}.{alias.name}"

    def dotted(node: ast.expr) -> str | None:
        if isinstance(node, ast.Name):
            return imported.get(node.id)
        if isinstance(node, ast.Attribute):
            base = dotted(node.value)
            return f"{base}.{node.attr}" if base else None
        return None

    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Load):
            name = dotted(node)
            if name and opens_a_connection(name):
                found.append(f"{node.lineno}: {name}")
    return found


@pytest.mark.parametrize("source", [
    "from psycopg import connect\nconnect('')",
    "import psycopg\npsycopg.Connection.connect('')",
    "import psycopg as pg\npg.connect('')",
    "from psycopg import AsyncConnection as C\nC.connect('')",
    "import sqlalchemy\nsqlalchemy.create_engine('postgresql://', creator=None)",
    "import psycopg\nfactory = psycopg.connect",
])
def test_every_spelling_of_a_connection_is_found(source):
    assert len(connecting_names(source)) == 1, source


def test_what_does_not_connect_is_not_found():
    assert connecting_names("import psycopg.conninfo\nfrom . import db\nfrom psycopg import sql\n"
                            "c: psycopg.Connection | None = db.connect('')\npsycopg.conninfo.make_conninfo('')") == []


def test_one_module_connects():
    """labkit.db sets every connection's options and names its role: no other module opens a connection."""
    found = {path.relative_to(ROOT).as_posix(): connecting_names(path.read_text(encoding="utf-8"))
             for path in sorted((ROOT / "labkit").rglob("*.py"))}
    assert "psycopg.connect" in " ".join(found.pop("labkit/db.py"))  # the one place, found by the same search
    assert {path: names for path, names in found.items() if names} == {}


@pytest.mark.parametrize("path", sorted((ROOT / "notebooks").glob("*.ipynb")), ids=lambda path: path.name)
def test_notebook_is_committed_without_outputs(path):
    notebook = json.loads(path.read_text(encoding="utf-8"))
    with_outputs = [index for index, cell in enumerate(notebook["cells"])
                    if cell["cell_type"] == "code" and (cell.get("outputs") or cell.get("execution_count"))]
    assert with_outputs == [], f"cells {with_outputs} of {path.name} carry outputs: clear them before committing"
