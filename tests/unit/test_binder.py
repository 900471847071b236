"""The Binder link and badge an instructor gets for a public copy of the labs."""

import shutil
import subprocess
from pathlib import Path

import pytest

from labkit import binder
from labkit.__main__ import main
from labkit.errors import UsageError

ROOT = Path(__file__).resolve().parents[2]
needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="the command reads a git repository's origin, "
                               "and git is not installed here")


@pytest.mark.parametrize("remote", [
    "https://github.com/someone/pg-labs",
    "https://github.com/someone/pg-labs.git",
    "https://github.com/someone/pg-labs/",
    "git@github.com:someone/pg-labs.git",
    "ssh://git@github.com/someone/pg-labs.git",
    "https://token@github.com/someone/pg-labs.git",
])
def test_every_form_of_a_github_remote_gives_the_same_link(remote):
    assert binder.link(remote) == ("https://mybinder.org/v2/gh/someone/pg-labs/HEAD"
                                   "?urlpath=lab/tree/notebooks/00-start-here.ipynb")


def test_the_ref_and_the_notebook_are_escaped():
    url = binder.link("https://github.com/a/b", ref="fall 2027/v1", path="notebooks/02-flash-sale.ipynb")
    assert url == "https://mybinder.org/v2/gh/a/b/fall%202027%2Fv1?urlpath=lab/tree/notebooks/02-flash-sale.ipynb"


@pytest.mark.parametrize("remote", ["/home/me/labs", "file:///home/me/labs", "../labs", "", "https://github.com/only-owner"])
def test_an_address_binder_cannot_build_from_is_refused_with_what_to_do(remote):
    with pytest.raises(UsageError, match="github.com/OWNER/REPOSITORY"):
        binder.link(remote)


def test_the_badge_goes_between_the_markers_once(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"# Labs\n{binder.BEGIN}\n{binder.END}\n\nText.\n")
    line = binder.badge(binder.link("https://github.com/a/b"))
    assert binder.write_badge(readme, line) is True
    assert readme.read_text() == f"# Labs\n{binder.BEGIN}\n{line}\n{binder.END}\n\nText.\n"
    assert binder.write_badge(readme, line) is False
    other = binder.badge(binder.link("https://github.com/c/d"))
    assert binder.write_badge(readme, other) is True
    assert readme.read_text().count("mybinder.org/v2/") == 1 and "gh/c/d" in readme.read_text()


def test_a_readme_without_markers_is_left_alone(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# Labs\n", encoding="utf-8")
    with pytest.raises(UsageError, match="badge markers"):
        binder.write_badge(readme, "x")
    assert readme.read_text(encoding="utf-8") == "# Labs\n"


def test_the_project_readme_has_the_markers_near_its_top():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert binder.BEGIN in lines[:5] and binder.END in lines[:8]


@needs_git
def test_the_command_reads_origin_and_writes_the_readme(tmp_path, capsys):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "remote", "add", "origin", "git@github.com:course/pg-labs.git"], check=True)
    readme = tmp_path / "README.md"
    readme.write_text(f"{binder.BEGIN}\n{binder.END}\n")
    assert binder.origin(tmp_path) == "git@github.com:course/pg-labs.git"
    assert main(["binder", binder.origin(tmp_path), "--readme", str(readme)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "https://mybinder.org/v2/gh/course/pg-labs/HEAD?urlpath=lab/tree/notebooks/00-start-here.ipynb"
    assert out[2].endswith("badge written")
    assert f"]({out[0]})" in readme.read_text()


@needs_git
def test_without_an_origin_the_command_says_what_to_pass(tmp_path, monkeypatch, capsys):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    monkeypatch.chdir(tmp_path)
    assert main(["binder"]) == 2
    assert "pass the repository's public address" in capsys.readouterr().err
