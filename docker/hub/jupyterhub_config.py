# JupyterHub for a class on one machine: every student a system user of their own, with their own
# home, their own copy of the labs and their own embedded PostgreSQL (labkit starts it in the
# student's home on their first lab, as on a laptop).
#
#   jupyterhub -f docker/hub/jupyterhub_config.py      (as root: it creates the students' system users)
#
# docker/hub/Dockerfile runs it in a container; tests/hub runs it with a real hub and three students.
# Everything is set through the hub's environment:
#
# | variable                 | meaning                                                            | default |
# |--------------------------|--------------------------------------------------------------------|---------|
# | LABKIT_HUB_URL           | where the hub listens                                              | http://127.0.0.1:8000 |
# | LABKIT_HUB_STATE         | the hub's own files (database, cookie secret)                      | /srv/jupyterhub |
# | LABKIT_HUB_HOMES         | the folder the students' homes are made in                         | /home |
# | LABKIT_HUB_PREFIX        | before each hub user name to make the system user's                | student- |
# | LABKIT_HUB_STUDENTS      | how many students run labs at once: sizes the profile              | 20 |
# | LABKIT_HUB_PROFILE       | ci or laptop, instead of choosing by the machine's size            | |
# | LABKIT_HUB_IDLE_TIMEOUT  | seconds without activity before a student's server is stopped      | 3600 |
# | LABKIT_HUB_CULL_EVERY    | how often the idle culler looks, in seconds                        | 300 |
# | LABKIT_HUB_DB_IDLE_STOP  | seconds a student's PostgreSQL stays up once no kernel uses it     | 120 |
# | LABKIT_HUB_ACTIVITY      | seconds between a server's activity reports to the hub             | 300 |
# | LABKIT_HUB_AUTH          | firstuse (students choose a password at first login), dummy, or a class path | firstuse |
# | LABKIT_HUB_ALLOWED       | a file of the user names allowed in, one per line                  | |
# | LABKIT_HUB_ADMINS        | the instructors' user names, comma-separated                       | |
# | LABKIT_HUB_PASSWORD      | the shared password of the dummy authenticator (tests only)        | |
#
# Only root can run the hub like this (it creates users and starts each server as its student);
# Linux only (useradd). The machine's size, the chosen profile and every student created are
# written to the hub's log.

import asyncio
import os
import pwd
import re
import subprocess
import sys
from pathlib import Path

from jupyterhub.spawner import LocalProcessSpawner, set_user_setuid

import labkit
from labkit.profiles import for_class, machine_size

c = get_config()  # noqa: F821 - provided by JupyterHub's config loader

env = os.environ.get
STATE = Path(env("LABKIT_HUB_STATE", "/srv/jupyterhub"))
HOMES = Path(env("LABKIT_HUB_HOMES", "/home"))
PREFIX = env("LABKIT_HUB_PREFIX", "student-")
if not re.fullmatch(r"[a-z_][a-z0-9_-]{0,15}", PREFIX):
    sys.exit("LABKIT_HUB_PREFIX must be 1-16 lower-case letters, digits, '-' or '_': without it a student "
             "could log in under the name of a system account")
# The labs each student gets a copy of: the notebooks next to the installed labkit (an editable install).
LABS = Path(labkit.__file__).resolve().parent.parent / "notebooks"
if not (LABS / "00-start-here.ipynb").exists():
    sys.exit(f"No labs in {LABS}: install the project with `pip install -e '.[hub]'` from its checkout")
LABS_FOLDER = "pg-concurrency-labs"  # in each student's home
COMMENT = "labs student"  # in the comment field of every system user the hub makes
# A hub name the system user can be made from: useradd's portable names, 32 characters with the prefix
HUB_NAME = rf"[a-z0-9_][a-z0-9_-]{{0,{31 - len(PREFIX)}}}"


def system_name(hub_name: str) -> str:
    """The system user a hub user runs as: the prefix and the hub name."""
    if not re.fullmatch(HUB_NAME, hub_name):
        raise ValueError(f"{hub_name!r} cannot be a student's user name here: use lower-case letters, digits, "
                         f"'-' and '_', at most {32 - len(PREFIX)} characters")
    return PREFIX + hub_name


def new_uid(home: Path) -> int:
    """The user number for a new student: their kept home's owner's, else one above every number in use.

    The homes outlive the system users when the hub runs in a container (a new container has a
    fresh /etc/passwd): a new student must never get the number that owns someone else's home.
    """
    if home.is_dir():
        return home.stat().st_uid
    taken = [entry.pw_uid for entry in pwd.getpwall()]
    taken += [folder.stat().st_uid for folder in HOMES.iterdir() if folder.is_dir()] if HOMES.is_dir() else []
    return max([999, *[uid for uid in taken if uid < 60000]]) + 1


def _ensure_student(spawner) -> None:
    name = system_name(spawner.user.name)
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        HOMES.mkdir(parents=True, exist_ok=True)
        home = HOMES / name
        subprocess.run(["useradd", "--create-home", "--home-dir", str(home), "--shell", "/bin/bash", "--user-group",
                        "--uid", str(new_uid(home)), "--comment", f"{COMMENT} {spawner.user.name}", name],
                       check=True, capture_output=True, timeout=60)
        entry = pwd.getpwnam(name)
        spawner.log.info("created the system user %s (home %s) for %s", name, entry.pw_dir, spawner.user.name)
    if not entry.pw_gecos.startswith(COMMENT) or entry.pw_uid < 1000:
        raise RuntimeError(f"{name} is a system account the hub did not make: refusing to start a server as it")
    home = Path(entry.pw_dir)
    home.chmod(0o700)  # useradd follows UMASK (022 on Debian): no other student may read this home
    # The copy is made by the student's own process, so it is theirs, and a link they planted
    # cannot make root write elsewhere; -I and a bare environment keep their files (a planted
    # shutil.py) and the hub's secrets out of it. An existing copy holds their edits: left alone.
    copy = ("import shutil, sys; from pathlib import Path; target = Path(sys.argv[2]); "
            "target.exists() or shutil.copytree(sys.argv[1], target, "
            "ignore=shutil.ignore_patterns('.ipynb_checkpoints', '__pycache__', 'kernel-ipc-*'))")
    try:
        subprocess.run([sys.executable, "-I", "-c", copy, str(LABS), str(home / LABS_FOLDER)], check=True,
                       user=entry.pw_uid, group=entry.pw_gid, extra_groups=[], cwd=home, capture_output=True,
                       env={"HOME": str(home), "PATH": "/usr/bin:/bin"}, timeout=120)
    except PermissionError:
        raise RuntimeError(f"The students cannot run {sys.executable}: install the hub's Python and the labs where "
                           "every user can read them (e.g. under /opt), not in root's home.") from None


async def ensure_student(spawner) -> None:
    """Before a server starts: the student's system user, a home only they can enter, and their copy of the labs.

    In a thread: the hub's event loop serves every other student meanwhile.
    """
    await asyncio.to_thread(_ensure_student, spawner)


class StudentSpawner(LocalProcessSpawner):
    """LocalProcessSpawner, running each hub user as their own system user ``PREFIX + name``."""

    def make_preexec_fn(self, name):
        return set_user_setuid(system_name(name))

    def user_env(self, env):
        entry = pwd.getpwnam(system_name(self.user.name))
        env.update(USER=entry.pw_name, LOGNAME=entry.pw_name, HOME=entry.pw_dir, SHELL=entry.pw_shell)
        return env


def class_profile() -> str:
    """LABKIT_HUB_PROFILE, or the profile each student's share of this machine suits."""
    chosen = env("LABKIT_HUB_PROFILE", "").strip()
    if chosen:
        return chosen
    students = int(env("LABKIT_HUB_STUDENTS", "20"))
    cores, memory = machine_size()
    profile = for_class(students, cores, memory)
    print(f"{students} students at once on {cores:g} CPUs and {memory / 2**30:.1f} GiB: the '{profile}' profile "
        "(set LABKIT_HUB_STUDENTS or LABKIT_HUB_PROFILE to change it)")
    return profile


STATE.mkdir(parents=True, exist_ok=True)
STATE.chmod(0o700)  # the hub's database and the passwords: not for the students (Docker makes a volume 0755)
c.JupyterHub.bind_url = env("LABKIT_HUB_URL", "http://127.0.0.1:8000")
c.JupyterHub.db_url = f"sqlite:///{STATE / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(STATE / "jupyterhub_cookie_secret")
c.ConfigurableHTTPProxy.pid_file = str(STATE / "jupyterhub-proxy.pid")
c.JupyterHub.last_activity_interval = int(env("LABKIT_HUB_ACTIVITY", "300"))

c.JupyterHub.spawner_class = StudentSpawner
c.Spawner.pre_spawn_hook = ensure_student
# The single-user server runs in the hub's own Python environment, where the labs are installed.
c.Spawner.cmd = [sys.executable, "-m", "jupyterhub.singleuser"]
c.Spawner.default_url = f"/lab/tree/{LABS_FOLDER}/00-start-here.ipynb"
c.Spawner.start_timeout = 120
c.Spawner.http_timeout = 120
c.Spawner.environment = {
    "LABKIT_PROFILE": class_profile(),
    "LABKIT_IDLE_STOP": env("LABKIT_HUB_DB_IDLE_STOP", "120"),
    "JUPYTERHUB_ACTIVITY_INTERVAL": env("LABKIT_HUB_ACTIVITY", "300"),
}

# The idle culler stops a server nobody has used for LABKIT_HUB_IDLE_TIMEOUT seconds; with its
# kernels gone, the student's PostgreSQL stops LABKIT_HUB_DB_IDLE_STOP seconds later (labkit's watchdog).
c.JupyterHub.services = [{
    "name": "idle-culler",
    "command": [sys.executable, "-m", "jupyterhub_idle_culler", f"--timeout={env('LABKIT_HUB_IDLE_TIMEOUT', '3600')}",
                f"--cull-every={env('LABKIT_HUB_CULL_EVERY', '300')}"],
}]
c.JupyterHub.load_roles = [{
    "name": "idle-culler",
    "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers"],
    "services": ["idle-culler"],
}]

AUTH = env("LABKIT_HUB_AUTH", "firstuse")
if AUTH == "firstuse":
    c.JupyterHub.authenticator_class = "firstuseauthenticator.FirstUseAuthenticator"
    c.FirstUseAuthenticator.dbm_path = str(STATE / "passwords.dbm")
    # With a class list, only its names (and the admins) may log in. Whoever logs in first under a
    # name sets its password: instructors log in before the address is shared.
    c.FirstUseAuthenticator.create_users = not env("LABKIT_HUB_ALLOWED")
elif AUTH == "dummy":
    c.JupyterHub.authenticator_class = "dummy"
    c.DummyAuthenticator.password = env("LABKIT_HUB_PASSWORD") or sys.exit("LABKIT_HUB_AUTH=dummy needs LABKIT_HUB_PASSWORD")
else:
    c.JupyterHub.authenticator_class = AUTH
if env("LABKIT_HUB_ALLOWED"):
    allowed = Path(env("LABKIT_HUB_ALLOWED")).read_text(encoding="utf-8").split()
    c.Authenticator.allowed_users = {name.strip().lower() for name in allowed if name.strip()}
else:
    c.Authenticator.allow_all = True
c.Authenticator.username_pattern = HUB_NAME + r"\Z"  # refused at login, not at the first spawn
c.Authenticator.admin_users = {name.strip() for name in env("LABKIT_HUB_ADMINS", "").split(",") if name.strip()}
