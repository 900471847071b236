"""Images the container tests build again at each run: the one a tag pointed to before is removed once replaced.

Each build of a changed context gives the tag a new image and leaves the old one untagged (about
1 GB for the hub's and the classroom's): run after run on one CI machine, they would fill its disk.
"""

from __future__ import annotations

import subprocess


def image_ids(*tags: str) -> dict[str, str | None]:
    """Each tag's image id now (None: no such image)."""
    found = {}
    for tag in tags:
        done = subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}", tag], capture_output=True,
                              encoding="utf-8", errors="replace", timeout=60)
        found[tag] = done.stdout.strip() if done.returncode == 0 else None
    return found


def drop_replaced(before: dict[str, str | None]) -> list[str]:
    """Remove the images the tags in ``before`` pointed to, where a build has since pointed them elsewhere.

    Without --force: an image a container still uses stays. Returns the ids removed.
    """
    removed = []
    for tag, old in before.items():
        if old and image_ids(tag)[tag] != old:
            done = subprocess.run(["docker", "image", "rm", old], capture_output=True, timeout=120)
            if done.returncode == 0:
                removed.append(old)
    return removed
