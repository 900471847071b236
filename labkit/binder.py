"""Binder: the launch link and badge of a public copy of the labs, and knowing when we run there.

mybinder.org builds a repository with repo2docker (from ``environment.yml``) and opens it in
JupyterLab. Its launch URL names the repository by provider::

    >>> link("https://github.com/someone/pg-labs.git")
    'https://mybinder.org/v2/gh/someone/pg-labs/HEAD?urlpath=lab/tree/notebooks/00-start-here.ipynb'
    >>> link("git@gitlab.com:course/2027/pg-labs.git", ref="main")
    'https://mybinder.org/v2/gl/course%2F2027%2Fpg-labs/main?urlpath=lab/tree/notebooks/00-start-here.ipynb'
    >>> link("https://git.example.edu/db/pg-labs")
    'https://mybinder.org/v2/git/https%3A%2F%2Fgit.example.edu%2Fdb%2Fpg-labs/HEAD?urlpath=lab/tree/notebooks/00-start-here.ipynb'
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from urllib.parse import quote

from .errors import UsageError

HOST = "https://mybinder.org"
START = "notebooks/00-start-here.ipynb"
BADGE_IMAGE = "https://mybinder.org/badge_logo.svg"
# The README's badge goes between these two lines (``write_badge``).
BEGIN = "<!-- binder badge: python -m labkit binder --readme -->"
END = "<!-- /binder badge -->"

_REMOTE = re.compile(r"^(?:https?://(?:[^@/]+@)?|ssh://(?:[^@/]+@)?|[^@/]+@)(?P<host>[^/:]+)(?::\d+)?[/:](?P<path>.+?)(?:\.git)?/?$")


def on_binder(environ=None) -> bool:
    """True inside a Binder session (BinderHub sets BINDER_REPO_URL and BINDER_LAUNCH_HOST).

    >>> on_binder({"BINDER_REPO_URL": "https://github.com/someone/pg-labs"}), on_binder({})
    (True, False)
    """
    environ = os.environ if environ is None else environ
    return bool(environ.get("BINDER_REPO_URL") or environ.get("BINDER_LAUNCH_HOST"))


def link(remote: str, *, ref: str = "HEAD", path: str = START, host: str = HOST) -> str:
    """The Binder launch URL that opens ``path`` in JupyterLab for the repository at ``remote``."""
    return f"{host.rstrip('/')}/v2/{_spec(remote, ref)}?urlpath=lab/tree/{quote(path)}"


def badge(url: str) -> str:
    """The README line: Binder's badge linking to ``url``.

    >>> badge("https://mybinder.org/v2/gh/a/b/HEAD")
    '[![Launch the labs on Binder](https://mybinder.org/badge_logo.svg)](https://mybinder.org/v2/gh/a/b/HEAD)'
    """
    return f"[![Launch the labs on Binder]({BADGE_IMAGE})]({url})"


def origin(cwd: Path | str = ".") -> str:
    """The ``origin`` remote of the git checkout at ``cwd``."""
    try:
        result = subprocess.run(["git", "remote", "get-url", "origin"], cwd=cwd, capture_output=True, text=True, encoding="utf-8", errors="replace")
    except FileNotFoundError:
        raise UsageError("git is not installed: pass the repository's public address instead.") from None
    if result.returncode != 0:
        raise UsageError("This checkout has no 'origin' remote: pass the repository's public address, "
                         "e.g. python -m labkit binder https://github.com/OWNER/REPOSITORY") from None
    return result.stdout.strip()


def write_badge(readme: Path, line: str) -> bool:
    """Put ``line`` between the README's badge markers; True when the file changed."""
    text = readme.read_text(encoding="utf-8")
    if BEGIN not in text or END not in text.split(BEGIN, 1)[1]:
        raise UsageError(f"{readme} has no badge markers: add the two lines {BEGIN} and {END} where the badge goes.")
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    new = f"{head}{BEGIN}\n{line}\n{END}{tail}"
    if new == text:
        return False
    readme.write_text(new, encoding="utf-8")
    return True


def _spec(remote: str, ref: str) -> str:
    address = remote.strip()
    match = _REMOTE.match(address)
    if not match or address.startswith("file:"):
        raise UsageError(
            f"{address!r} is not a public repository address: Binder builds from one. Push the labs "
            "to GitHub (or GitLab, or any public git host) and pass its address, e.g. "
            "python -m labkit binder https://github.com/OWNER/REPOSITORY")
    host, path = match["host"].lower(), match["path"].strip("/")
    quoted_ref = quote(ref, safe="")
    if host == "github.com":
        parts = path.split("/")
        if len(parts) != 2:
            raise UsageError(f"{address!r}: a GitHub address is github.com/OWNER/REPOSITORY.")
        return f"gh/{parts[0]}/{parts[1]}/{quoted_ref}"
    if host == "gitlab.com":
        return f"gl/{quote(path, safe='')}/{quoted_ref}"
    return f"git/{quote(f'https://{host}/{path}', safe='')}/{quoted_ref}"
