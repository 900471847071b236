"""LABKIT_BACKEND=docker and docker/compose.yaml, checked without a Docker engine.

The compose file's server must get the settings labkit's profiles want (labkit.backend.lab_settings
is the one list); the backend's container gets a password of its own and a port on this machine only.
"""

import re
from pathlib import Path

import pytest
import yaml

from labkit.backend import LAB_SETTINGS, lab_settings
from labkit.profiles import Profile

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker" / "compose.yaml"


def expand(text: str, environment: dict[str, str]) -> str:
    """Compose's interpolation of ``${NAME:-default}`` and ``${NAME}``."""
    def one(match):
        name, default = match.group(1), match.group(3)
        return environment.get(name) or (default if default is not None else "")
    return re.sub(r"\$\{(\w+)(:-([^}]*))?\}", one, text)


def postgresql_conf(lines: str) -> dict[str, str]:
    settings = {}
    for line in lines.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, value = (part.strip() for part in line.split("=", 1))
            settings[name] = value.strip("'")
    return settings


def image_settings() -> dict[str, str]:
    """What docker/Dockerfile bakes into every cluster of the image."""
    text = (ROOT / "docker" / "Dockerfile").read_text(encoding="utf-8")
    return dict(re.findall(r'"(\w+) = \'([^\']*)\'"', text))


def compose_settings(environment: dict[str, str]) -> dict[str, str]:
    """The settings the compose file's server starts with (the image's, then LABKIT_SETTINGS'), under ``environment``."""
    service = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))["services"]["postgres"]
    return {**image_settings(), **postgresql_conf(expand(service["environment"]["LABKIT_SETTINGS"], environment))}


def profile_variables() -> dict[str, dict[str, str]]:
    """What the compose file's header says to set for each profile (``LABKIT_PROFILE=x NAME=value ...``)."""
    found = {}
    for line in COMPOSE.read_text(encoding="utf-8").splitlines():
        match = re.match(r"#\s+(LABKIT_PROFILE=(\w+)(?: \w+=\S+)*)", line)
        if match:
            found[match.group(2)] = dict(pair.split("=", 1) for pair in match.group(1).split())
    return found


def test_compose_gives_the_server_every_setting_of_the_laptop_profile_by_default():
    default_profile = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))["services"]["jupyter"]["environment"][
        "LABKIT_PROFILE"]
    assert expand(default_profile, {}) == "laptop"
    assert compose_settings({}) == lab_settings(Profile.named("laptop"), "linux")


@pytest.mark.parametrize("profile", ["ci", "laptop", "article"])
def test_the_header_says_what_to_set_for_each_profile_and_that_gives_its_settings(profile):
    variables = profile_variables()
    assert profile in variables, f"docker/compose.yaml's header says nothing for the {profile} profile"
    assert variables[profile]["LABKIT_PROFILE"] == profile
    assert compose_settings(variables[profile]) == lab_settings(Profile.named(profile), "linux")


def test_the_image_bakes_only_what_every_profile_shares():
    assert set(image_settings()) <= set(LAB_SETTINGS)
