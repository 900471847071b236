"""The settings labkit writes on Windows, macOS and Linux, read against the manual's platform notes.

The manual's notes are typed here from the manual itself (PostgreSQL 18, runtime-config-*.html
and the settings' check hooks), not from labkit: labkit's choice is checked against them.
"""

import re
from pathlib import Path

import pytest

from labkit.backend import LAB_SETTINGS, lab_settings, system_of
from labkit.embedded import start_settings
from labkit.profiles import Profile

ROOT = Path(__file__).resolve().parents[2]
SYSTEMS = ("windows", "macos", "linux")

# (system, setting) -> whether the manual says that system refuses the value. Only
# client_connection_check_interval has such a note among the settings labkit writes:
# "relies on kernel events exposed by Linux, macOS, illumos and the BSD family of operating
# systems, and is not currently available on other systems" (runtime-config-connection.html);
# Windows' check hook: "must be set to 0 on this platform".
REFUSED_BY_MANUAL = {
    ("windows", "client_connection_check_interval"): lambda value: value not in ("0", "0s", "0ms"),
}


def settings_for(system: str, profile: str = "laptop") -> dict[str, str]:
    transport = "tcp" if system == "windows" else "socket"
    return start_settings(Profile.named(profile), system, transport=transport, port=5432, socket_dir="run")


@pytest.mark.parametrize("system", SYSTEMS)
@pytest.mark.parametrize("profile", ["ci", "laptop", "article"])
def test_no_setting_is_one_the_manual_says_this_system_refuses(system, profile):
    written = settings_for(system, profile)
    refused = [f"{name} = {value}" for name, value in written.items()
               if REFUSED_BY_MANUAL.get((system, name), lambda value: False)(value)]
    assert refused == []


def test_what_each_system_gets():
    windows, macos, linux = (settings_for(system) for system in SYSTEMS)
    # The connection check where the OS has it; 0 written on Windows, so that a line an older
    # labkit left in postgresql.conf is overridden rather than stopping the server.
    assert (linux["client_connection_check_interval"], macos["client_connection_check_interval"]) == ("2s", "2s")
    assert windows["client_connection_check_interval"] == "0"
    assert "client_connection_check_interval" not in lab_settings(Profile.named("ci"), "windows")
    # The transport: TCP on loopback with no socket on Windows; a private socket and no TCP elsewhere.
    assert (windows["listen_addresses"], windows["unix_socket_directories"]) == ("127.0.0.1", "")
    assert (linux["listen_addresses"], linux["unix_socket_permissions"]) == ("", "0700")
    assert linux["unix_socket_directories"] == '"run"'
    # Everything else is the same everywhere.
    same = set(LAB_SETTINGS) - {"client_connection_check_interval"}
    assert {name: windows[name] for name in same} == {name: linux[name] for name in same} == {
        name: macos[name] for name in same}


def test_this_machine_is_named_as_the_manual_names_it():
    import sys

    assert system_of(sys.platform) in {"linux", "macos", "windows", "bsd", "illumos"}


def test_the_docker_image_has_the_same_lab_settings():
    """docker/Dockerfile bakes the settings into a Linux image: they must be the Linux ones."""
    text = (ROOT / "docker" / "Dockerfile").read_text(encoding="utf-8")
    baked = dict(re.findall(r'"(\w+) = \'([^\']*)\'"', text))
    wanted = lab_settings(Profile.named("laptop"), "linux")
    assert baked == {name: value for name, value in wanted.items() if name in LAB_SETTINGS}
