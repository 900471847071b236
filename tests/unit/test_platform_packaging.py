"""What a non-editable install gets: the wheel pip builds from pyproject.toml, and the floor it builds with."""

import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def setuptools_floor() -> Version:
    (requirement,) = [Requirement(text) for text in PYPROJECT["build-system"]["requires"]
                      if Requirement(text).name == "setuptools"]
    floors = [Version(spec.version) for spec in requirement.specifier if spec.operator in (">=", "==", "~=")]
    assert floors, f"setuptools has no floor in {requirement}"
    return max(floors)


def test_a_license_expression_is_built_by_a_setuptools_that_reads_it():
    """PEP 639's ``license = "SPDX"`` is read from setuptools 77 on; an older one stops the build."""
    if isinstance(PYPROJECT["project"].get("license"), str):
        assert setuptools_floor() >= Version("77")


# What a build writes beside the sources it reads; never the project's own (a checkout, or the tests' copy of it).
BUILD_OUTPUT = ("build", "*.egg-info", "dist")
LEFT_OUT = shutil.ignore_patterns(".git", ".venv", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache",
                                  "executed", "node_modules",
                                  *BUILD_OUTPUT)


def build_output(folder: Path) -> dict[str, float]:
    """The build output in ``folder``, each file with when it was written."""
    return {str(path.relative_to(folder)): path.stat().st_mtime for pattern in BUILD_OUTPUT
            for found in folder.glob(pattern) for path in [found, *found.rglob("*")]}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """The wheel `pip wheel --no-deps .` builds from a copy of the project (its build output kept beside it).

    setuptools writes ``build/`` and ``*.egg-info`` in the folder it builds: a copy's, so that the
    checkout (an editable install's egg-info among it) is left as it was.
    """
    before = build_output(ROOT)
    source = tmp_path_factory.mktemp("source") / "pg-concurrency-labs"
    shutil.copytree(ROOT, source, ignore=LEFT_OUT)
    folder = tmp_path_factory.mktemp("wheel")
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-cache-dir", "-v", "-w",
                            str(folder), str(source)], capture_output=True, encoding="utf-8", errors="replace",
                           timeout=300)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    assert build_output(ROOT) == before, "the build wrote into the project's own folder"
    (path,) = folder.glob("*.whl")
    return path, built.stdout + built.stderr


@pytest.mark.build
def test_the_wheel_carries_what_labkit_reads_at_run_time(wheel):
    path, _ = wheel
    names = set(zipfile.ZipFile(path).namelist())
    for shipped in ("labkit/docker/Dockerfile", "labkit/docker/entrypoint.sh", "labkit/docker/initdb/labkit-settings.sh",
                    "labkit/data/02-flash-sale.csv", "labkit/sql/connections.sql", "labkit/js/live_figure.js"):
        assert shipped in names, f"{shipped} is not in {path.name}"
    for source in (ROOT / "data").glob("*.csv"):
        assert f"labkit/data/{source.name}" in names
    assert not [name for name in names if name.startswith(("docker/", "data/", "tests/", "notebooks/"))]


@pytest.mark.build
def test_the_build_warns_about_no_data_folder(wheel):
    _, output = wheel
    assert not re.findall(r"Package '[\w.]+' is absent from the `packages` configuration", output)


@pytest.mark.build
def test_an_installed_labkit_finds_its_image_and_figures(wheel, tmp_path):
    """The wheel unpacked on its own (no source checkout beside it): labkit finds docker/ and data/ inside itself."""
    path, _ = wheel
    zipfile.ZipFile(path).extractall(tmp_path)
    probe = ("import sys; sys.path.insert(0, sys.argv[1]); from labkit import article, config, docker_backend; "
             "print(docker_backend.docker_dir()); print(config.shipped('data')); "
             "print(len(article.figures('02-flash-sale')) > 0)")
    found = subprocess.run([sys.executable, "-c", probe, str(tmp_path)], capture_output=True, encoding="utf-8",
                           check=True, cwd=tmp_path).stdout.splitlines()
    assert found[2] == "True"  # the article's figures, read from inside the package
    assert [Path(line) for line in found[:2]] == [tmp_path / "labkit" / "docker", tmp_path / "labkit" / "data"]
    assert (Path(found[0]) / "Dockerfile").exists() and (Path(found[1]) / "02-flash-sale.csv").exists()


def package_folders() -> list[str]:
    """The folder of each package pyproject.toml lists (a package-dir entry maps a package and those under it)."""
    settings = PYPROJECT["tool"]["setuptools"]
    mapped = settings.get("package-dir", {})
    folders = []
    for package in settings["packages"]:
        prefix = max((name for name in mapped if package == name or package.startswith(name + ".")), key=len,
                     default="")
        base, rest = (mapped[prefix], package[len(prefix) + 1:]) if prefix else ("", package)
        folders.append("/".join(part for part in [base, *rest.split(".")] if part))
    return folders


@pytest.mark.parametrize("dockerfile", ["docker/jupyter.Dockerfile", "docker/hub/Dockerfile"])
def test_an_image_that_installs_the_project_copies_every_folder_it_builds_from(dockerfile):
    """setuptools stops the install when a listed package's folder is missing from the image."""
    text = (ROOT / dockerfile).read_text(encoding="utf-8")
    assert re.search(r"pip install [^\n]*-e '?\.", text)
    copied = [source for line in re.findall(r"^COPY (?:--\S+ )*(.+)$", text, re.MULTILINE)
              for source in line.split()[:-1]]
    missing = [folder for folder in package_folders()
               if not any(folder == source or folder.startswith(source + "/") or source.startswith(folder + "/")
                          for source in (source.rstrip("/") for source in copied))]
    assert missing == [], f"{dockerfile} does not copy {missing}"
    # and the lab server image's own files, which labkit builds from (LABKIT_BACKEND=docker)
    image_files = [f"docker/{name}" for name in PYPROJECT["tool"]["setuptools"]["package-data"]["labkit.docker"]]
    assert [name for name in image_files if name not in copied] == []
    assert sorted(package_folders()) == ["data", "docker", "docker/initdb", "labkit", "labkit/js", "labkit/sql"]


def test_the_jupyterlab_and_hub_images_share_their_dependency_layer():
    """The same first instructions in both: the engine builds the labs' dependencies once for the two images."""
    def first_layers(dockerfile: str) -> list[str]:
        lines = (ROOT / dockerfile).read_text(encoding="utf-8").splitlines()
        start = next(number for number, line in enumerate(lines) if line.startswith("ARG PYTHON_IMAGE="))
        end = next(number for number, line in enumerate(lines) if number > start and "pip install" in line)
        return lines[start:end + 1]

    jupyter = first_layers("docker/jupyter.Dockerfile")
    assert any(line.startswith("COPY pyproject.toml docker/requirements.py") for line in jupyter)
    assert first_layers("docker/hub/Dockerfile") == jupyter
