"""A real JupyterHub with docker/hub/jupyterhub_config.py, and students driven through its REST API.

Used by tests/hub (three students at once) and tests/benchmarks/bench_hub.py (a class of N).
The hub runs as root (it creates each student's system user and starts their server as that
user); configurable-http-proxy comes from npm (.ci/proxy). A student runs a lab the way
JupyterLab does: a kernel session in their own single-user server, each code cell sent as an
``execute_request`` over the kernel's websocket, with that student's own API token.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from labkit.docker_backend import OWNER_LABEL, owner_label, remove_orphans
from labkit.embedded import free_port

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "docker" / "hub" / "jupyterhub_config.py"
PROXY_DIR = ROOT / ".ci" / "proxy"
PREFIX = "labkit-t-"  # the system users the hub makes for the tests: labkit-t-alice, ...
COMMENT = "labs student"  # what ensure_student writes in each user's comment field
LABS_FOLDER = "pg-concurrency-labs"


def why_not() -> str | None:
    """Why a hub cannot run here (None: it can)."""
    if not sys.platform.startswith("linux"):
        return f"the class hub creates Linux system users (useradd); this is {sys.platform}"
    if os.geteuid() != 0:
        return "the class hub must run as root: it creates each student's system user and runs their server as them"
    if not shutil.which("node") or not (shutil.which("npm") or proxy_command()):
        return "configurable-http-proxy needs Node.js and npm, and this machine has " + (
            "no node" if not shutil.which("node") else "no npm")
    return None


def reachable(path: Path) -> bool:
    """True when every user can reach ``path``: each folder on the way searchable by all, the file readable by all.

    Both ways count: the path as given (a student goes through its folders, a link's too) and the file it leads to.
    """
    path = Path(os.path.abspath(path))
    target = path.resolve()
    return (all(parent.stat().st_mode & 0o001 for parent in (*path.parents, *target.parents))
            and bool(target.stat().st_mode & 0o004))


SYSTEM_BIN = Path("/usr/bin")  # where the stand-in's Python comes from


def student_python(folder: Path) -> str:
    """A Python with the labs installed that every student can run: this one, or a stand-in made in ``folder``.

    When this interpreter sits in root's private home (pyenv), a virtual environment of the
    system's Python of the same version is made in ``folder``; it reads this environment's
    packages (site.addsitedir, so the project's editable install comes along). When neither
    can be had, RuntimeError says which part is out of the students' reach.
    """
    if reachable(Path(sys.executable)) and reachable(Path(sys.base_prefix)):
        return sys.executable
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    system = SYSTEM_BIN / version
    packages = Path(next(p for p in sys.path if p.endswith("site-packages")))
    if not system.exists():
        cause = f"{system} is missing"
    elif not reachable(system):
        cause = f"{system} is in a folder other users cannot reach"
    elif not reachable(packages):
        cause = (f"this environment's packages ({packages}) are in a folder other users cannot reach, so {system} "
                 "cannot use them")
    else:
        target = folder / "python"
        subprocess.run([str(system), "-m", "venv", "--without-pip", str(target)], check=True, capture_output=True)
        shim = target / "lib" / version / "site-packages" / "labkit-test-packages.pth"
        shim.write_text(f"import site; site.addsitedir({str(packages)!r})\n", encoding="utf-8")
        return str(target / "bin" / "python")
    raise RuntimeError(f"no Python that every student can run: {sys.executable} is in a folder other users cannot "
                       f"reach, and {cause}. Run the hub test from a virtual environment outside any private home "
                       "(e.g. python3 -m venv /opt/labs-venv).")


def proxy_command() -> str | None:
    """configurable-http-proxy: .ci/proxy's, else one on PATH."""
    local = PROXY_DIR / "node_modules" / ".bin" / "configurable-http-proxy"
    return str(local) if local.exists() else shutil.which("configurable-http-proxy")


def install_proxy() -> str:
    """configurable-http-proxy from npm (the version .ci/proxy pins), installed there once."""
    found = proxy_command()
    if found:
        return found
    subprocess.run(["npm", "ci" if (PROXY_DIR / "package-lock.json").exists() else "install", "--no-audit", "--no-fund"],
                   cwd=PROXY_DIR, check=True, capture_output=True, timeout=600)
    found = proxy_command()
    assert found, "npm installed configurable-http-proxy, but its command is not in .ci/proxy/node_modules/.bin"
    return found


def system_user(name: str) -> pwd.struct_passwd:
    return pwd.getpwnam(PREFIX + name)


def processes_of(uid: int, names=("postgres", "pgbench")) -> list[str]:
    """'name pid' of each running process of ``uid`` called one of ``names``."""
    found = []
    for process in psutil.process_iter(["name", "uids", "status"]):
        info = process.info
        if info["uids"] and info["uids"].real == uid and info["name"] in names and info["status"] != psutil.STATUS_ZOMBIE:
            found.append(f"{info['name']} {process.pid}")
    return found


def remove_test_users() -> None:
    """Stop and delete the tests' system users: their PostgreSQL first (a fast shutdown frees its shared
    memory, which a kill would leave), then every other process, then the users and their homes."""
    for entry in pwd.getpwall():
        if not (entry.pw_name.startswith(PREFIX) and entry.pw_gecos.startswith(COMMENT)):
            continue

        def mine(uid=entry.pw_uid):
            return [p for p in psutil.process_iter(["uids", "name", "ppid"]) if p.info["uids"] and p.info["uids"].real == uid]

        running = mine()
        postmasters = [p for p in running if p.info["name"] == "postgres"
                       and not any(q.pid == p.info["ppid"] and q.info["name"] == "postgres" for q in running)]
        for process in postmasters:
            with contextlib.suppress(psutil.Error):
                process.send_signal(signal.SIGINT)  # PostgreSQL's fast shutdown
        psutil.wait_procs(postmasters, timeout=30)
        for _ in range(3):
            left = mine()
            if not left:
                break
            for process in left:
                with contextlib.suppress(psutil.Error):
                    process.kill()
            psutil.wait_procs(left, timeout=10)
        removed = subprocess.run(["userdel", "--remove", entry.pw_name], capture_output=True, text=True)
        shutil.rmtree(entry.pw_dir, ignore_errors=True)
        if removed.returncode not in (0, 12):  # 12: the home could not be removed (done above)
            raise RuntimeError(f"userdel {entry.pw_name}: {removed.stderr.strip()}")


@dataclass
class Hub:
    """A running JupyterHub (as root) with an admin service token; ``with Hub(...) as hub:``."""

    settings: dict = field(default_factory=dict)  # LABKIT_HUB_* for the config
    folder: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="labkit hub ")))
    port: int = field(default_factory=free_port)
    token: str = field(default_factory=lambda: secrets.token_hex(24))
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def homes(self) -> Path:
        return self.folder / "class homes"

    def __enter__(self) -> Hub:
        try:
            return self._start()
        except BaseException:
            self.__exit__(None, None, None)
            raise

    def _start(self) -> Hub:
        remove_test_users()
        self.folder.chmod(0o755)  # the students' homes are inside it
        proxy = install_proxy()
        wrapper = self.folder / "test_config.py"
        wrapper.write_text(
            f"load_subconfig({str(CONFIG)!r})\n"
            f"c.JupyterHub.hub_port = {free_port()}\n"
            f"c.ConfigurableHTTPProxy.api_url = 'http://127.0.0.1:{free_port()}'\n"
            f"c.JupyterHub.services.append({{'name': 'labkit-test', 'api_token': {self.token!r}}})\n"
            "c.JupyterHub.load_roles.append({'name': 'admin', 'services': ['labkit-test']})\n",
            encoding="utf-8")
        environment = {key: value for key, value in os.environ.items() if not key.startswith(("LABKIT_", "JUPYTER"))}
        environment.update({
            "PATH": f"{Path(proxy).parent}{os.pathsep}{environment.get('PATH', '')}",
            "LABKIT_HUB_URL": self.url,
            "LABKIT_HUB_STATE": str(self.folder / "state"),
            "LABKIT_HUB_HOMES": str(self.homes),
            "LABKIT_HUB_PREFIX": PREFIX,
            "LABKIT_HUB_AUTH": "dummy",
            "LABKIT_HUB_PASSWORD": secrets.token_hex(8),
            "LABKIT_HUB_PROFILE": "ci",
            **self.settings,
        })
        python = student_python(self.folder)
        with (self.folder / "hub.log").open("wb") as log:
            self.process = subprocess.Popen([python, "-m", "jupyterhub", "-f", str(wrapper)], cwd=self.folder,
                                            env=environment, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(OSError, Refused):  # not listening yet, or the proxy has no route to it yet
                self.api("GET", "")
                return self
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the hub did not start:\n{self.log()[-3000:]}")
            time.sleep(0.5)

    def __exit__(self, *exc) -> None:
        if self.process and self.process.poll() is None:
            # The proxy and the culler run in sessions of their own: known now, killed below if left.
            helpers = psutil.Process(self.process.pid).children(recursive=True)
            self.process.send_signal(signal.SIGTERM)  # the hub stops every server and the proxy it started
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
            for helper in helpers:
                with contextlib.suppress(psutil.Error):
                    if helper.uids().real == 0:  # the students' processes go with their users below
                        helper.kill()
        remove_test_users()
        shutil.rmtree(self.folder, ignore_errors=True)

    def log(self) -> str:
        return (self.folder / "hub.log").read_text(encoding="utf-8", errors="replace")

    def api(self, method: str, path: str, body=None, *, token: str | None = None):
        try:
            return request(f"{self.url}/hub/api/{path}", method, body, token or self.token)
        except Refused as failure:
            if failure.code < 500:
                raise
            raise RuntimeError(f"{method} {path}: HTTP {failure.code}; the hub's log ends:\n{self.log()[-4000:]}") from None

    def add_students(self, names) -> None:
        self.api("POST", "users", {"usernames": list(names)})

    def spawn(self, name: str) -> None:
        self.api("POST", f"users/{name}/server")

    def wait_ready(self, name: str, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            server = self.api("GET", f"users/{name}").get("servers", {}).get("")
            if server and server.get("ready"):
                return
            time.sleep(0.5)
        raise TimeoutError(f"{name}'s server was not ready in {timeout:.0f} s:\n{self.log()[-3000:]}")

    def running(self, name: str) -> bool:
        return bool(self.api("GET", f"users/{name}").get("servers", {}).get(""))

    def stop(self, name: str) -> None:
        with contextlib.suppress(Refused):
            self.api("DELETE", f"users/{name}/server")

    def student_token(self, name: str) -> str:
        return self.api("POST", f"users/{name}/tokens", {"note": "labkit test"})["token"]

    def server_request(self, name: str, path: str, *, token: str, body=None, method: str | None = None):
        """A request to ``name``'s single-user server (through the proxy), as the holder of ``token``."""
        return request(f"{self.url}/user/{name}/{path}", method or ("POST" if body else "GET"), body, token)


def request(url: str, method: str, body, token: str):
    """An HTTP request with a JSON body and an API token; the JSON answer (None when empty), or :class:`Refused`."""
    message = urllib.request.Request(url, method=method, data=None if body is None else json.dumps(body).encode(),
                                     headers={"Authorization": f"token {token}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(message, timeout=60) as response:
            text = response.read()
    except urllib.error.HTTPError as failure:
        failure.close()  # it holds the response open
        raise Refused(failure.code) from None
    return json.loads(text) if text else None


class Refused(Exception):
    """An HTTP answer other than 2xx (``code``)."""

    def __init__(self, code: int):
        super().__init__(f"HTTP {code}")
        self.code = code


@dataclass
class CellResult:
    status: str  # ok or error
    text: str  # the stream output
    error: str = ""


class Kernel:
    """A kernel session in a student's own server, driven over its websocket as JupyterLab does.

    Each call opens the websocket, does its work and closes it again (a websocket belongs to the
    event loop that opened it, and a lab runs in a thread of its own).
    """

    def __init__(self, hub: Hub, name: str, notebook: str, token: str):
        self.hub, self.name, self.token = hub, name, token
        session = hub.server_request(name, "api/sessions", token=token, body={
            "path": f"{LABS_FOLDER}/{notebook}", "name": notebook, "type": "notebook", "kernel": {"name": "python3"}})
        self.kernel_id = session["kernel"]["id"]
        self.session = uuid.uuid4().hex

    def run_lab(self, notebook: Path) -> tuple[float, str | None]:
        """Every code cell of ``notebook``, in order; (seconds, the first error or None)."""
        async def cells(socket_):
            started = time.monotonic()
            for number, source in enumerate(code_cells(notebook), 1):
                result = await self._execute(socket_, source)
                if result.status != "ok":
                    first = next((line for line in source.splitlines() if line.strip()), "")
                    return time.monotonic() - started, f"code cell {number} ({first[:60]}): {result.error}"
            return time.monotonic() - started, None
        return asyncio.run(self._connected(cells))

    def json(self, code: str):
        """Run ``code``, whose last output line is JSON, and return that value."""
        result = asyncio.run(self._connected(lambda socket_: self._execute(socket_, code)))
        assert result.status == "ok", f"{self.name}: {result.error}\n{result.text[-2000:]}"
        return json.loads(result.text.strip().splitlines()[-1])

    def start(self, code: str) -> None:
        """Start ``code`` and return once the kernel is busy with it (its result is never read)."""
        asyncio.run(self._connected(lambda socket_: self._execute(socket_, code, until="busy")))

    async def _connected(self, work):
        from tornado.httpclient import HTTPRequest
        from tornado.websocket import websocket_connect

        url = f"ws://127.0.0.1:{self.hub.port}/user/{self.name}/api/kernels/{self.kernel_id}/channels?session_id={self.session}"
        socket_ = await websocket_connect(HTTPRequest(url, headers={"Authorization": f"token {self.token}"}),
                                          max_message_size=512 * 2**20)
        try:
            return await work(socket_)
        finally:
            socket_.close()
            with contextlib.suppress(Exception):  # until the server answers the close: the stream is closed then
                while await asyncio.wait_for(socket_.read_message(), 10) is not None:
                    pass

    async def _execute(self, socket_, code: str, *, until: str = "idle", timeout: float = 900) -> CellResult:
        msg_id = uuid.uuid4().hex
        await socket_.write_message(json.dumps({
            "header": {"msg_id": msg_id, "username": self.name, "session": self.session, "msg_type": "execute_request",
                       "version": "5.3", "date": ""},
            "parent_header": {}, "metadata": {}, "buffers": [], "channel": "shell",
            "content": {"code": code, "silent": False, "store_history": True, "user_expressions": {},
                        "allow_stdin": False, "stop_on_error": True}}))
        text, reply, state = [], None, ""
        deadline = time.monotonic() + timeout
        while not (state == until == "busy" or (reply is not None and state == "idle")):
            raw = await asyncio.wait_for(socket_.read_message(), max(deadline - time.monotonic(), 0.1))
            if raw is None:
                return CellResult("error", "".join(text), "the kernel's websocket closed")
            if not isinstance(raw, str):
                continue  # a binary frame: a widget's buffers
            message = json.loads(raw)
            kind = message["header"]["msg_type"]
            if kind == "status" and message["content"]["execution_state"] in ("restarting", "dead"):
                # jupyter_server's own word on the kernel, with no parent: the cell will never finish
                return CellResult("error", "".join(text), f"the kernel is {message['content']['execution_state']}")
            if message.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            if kind == "stream":
                text.append(message["content"]["text"])
            elif kind == "execute_reply":
                reply = message["content"]
            elif kind == "status":
                state = message["content"]["execution_state"]
        if reply is None or reply["status"] == "ok":
            return CellResult("ok", "".join(text))
        return CellResult("error", "".join(text), f"{reply.get('ename')}: {reply.get('evalue')}")


def code_cells(notebook: Path) -> list[str]:
    return ["".join(cell["source"]) for cell in json.loads(notebook.read_text(encoding="utf-8"))["cells"]
            if cell["cell_type"] == "code"]


# What each student's kernel reports about its own server after the lab.
IDENTITY = """
import json, os, pwd, psutil, psycopg
from labkit import config
from labkit.embedded import EmbeddedServer
server = EmbeddedServer()
with psycopg.connect(server.conninfo("postgres")) as connection:
    row = connection.execute("select current_setting('data_directory'), current_setting('unix_socket_directories'), "
                             "current_setting('listen_addresses'), current_setting('port'), pg_backend_pid()").fetchone()
    backend_parent = psutil.Process(row[4]).ppid()  # while this connection's backend still runs
print(json.dumps({"data_directory": row[0], "socket_dir": str(server.socket_dir), "sockets": row[1],
                  "listen_addresses": row[2], "port": row[3], "backend_parent": backend_parent, "home": os.path.expanduser("~"),
                  "uid": os.getuid(), "user": pwd.getpwuid(os.getuid()).pw_name,
                  "data_owner": pwd.getpwuid(os.stat(row[0]).st_uid).pw_name,
                  "postmaster_pid": server.postmaster_pid(), "results": str(config.results_dir()),
                  "log_tail": [line for line in server.log_file.read_text(errors="replace").splitlines()
                               if any(word in line for word in ("received", "starting", "shut down", "ready to"))][-12:],
                  "watchdog_log": (server.watchdog_log.read_text(errors="replace").splitlines()[-12:]
                                   if server.watchdog_log.exists() else [])}))
"""

# Run in one student's kernel: try another student's socket folder and home (``other`` is that student's IDENTITY).
TRESPASS = """
import json, os, psycopg
other = json.loads({other!r})
outcome = {{}}
try:
    psycopg.connect(host=other["socket_dir"], port=int(other["port"]), user="postgres", dbname="postgres",
                    connect_timeout=5).close()
    outcome["connect"] = "connected"
except psycopg.OperationalError as error:
    outcome["connect"] = str(error).strip()
for key, path in (("home", other["home"]), ("results", other["results"]), ("data", other["data_directory"])):
    try:
        outcome[key] = "read: " + ", ".join(sorted(os.listdir(path))[:3])
    except OSError as error:
        outcome[key] = type(error).__name__
print(json.dumps(outcome))
"""


IMAGE = "pg-concurrency-labs-hub"  # docker/hub/compose.yaml's tag
IMAGE_CONFIG = "/opt/pg-concurrency-labs/docker/hub/jupyterhub_config.py"  # where docker/hub/Dockerfile puts it


@dataclass
class ContainerHub(Hub):
    """The hub image (docker/hub/Dockerfile) run as docker/hub/compose.yaml runs it, with an admin service token.

    Its own configuration (the image's default authenticator: students choose a password at first
    login), with one service added for the test; published on 127.0.0.1 only.
    """

    name: str = field(default_factory=lambda: f"labkit-test-hub-{secrets.token_hex(4)}")

    def _start(self) -> Hub:
        import docker

        client = docker.from_env()
        try:
            remove_orphans(client)  # the hubs of a test run killed before its clean-up, as labkit's servers
        finally:
            client.close()
        self.folder.chmod(0o755)  # the container's hub (root) reads the wrapper
        wrapper = self.folder / "test_config.py"
        wrapper.write_text(
            f"load_subconfig({IMAGE_CONFIG!r})\n"
            f"c.JupyterHub.services.append({{'name': 'labkit-test', 'api_token': {self.token!r}}})\n"
            "c.JupyterHub.load_roles.append({'name': 'admin', 'services': ['labkit-test']})\n", encoding="utf-8")
        wrapper.chmod(0o644)
        settings = [option for name, value in {"LABKIT_HUB_PROFILE": "ci", **self.settings}.items()
                    for option in ("--env", f"{name}={value}")]
        subprocess.run(["docker", "run", "--detach", "--name", self.name, "--publish", f"127.0.0.1:{self.port}:8000",
                        "--shm-size", "1g", *settings, "--volume", f"{wrapper}:/srv/test_config.py:ro",
                        "--label", f"{OWNER_LABEL}={owner_label()}",
                        IMAGE, "jupyterhub", "-f", "/srv/test_config.py"], check=True, capture_output=True, timeout=60)
        deadline = time.monotonic() + 90
        while True:
            with contextlib.suppress(OSError, Refused):
                self.api("GET", "")
                return self
            running = subprocess.run(["docker", "inspect", "--format", "{{.State.Running}}", self.name],
                                     capture_output=True, encoding="utf-8").stdout.strip()
            if running != "true" or time.monotonic() > deadline:
                raise RuntimeError(f"the hub's container did not start:\n{self.log()[-3000:]}")
            time.sleep(0.5)

    def __exit__(self, *exc) -> None:
        subprocess.run(["docker", "rm", "--force", "--volumes", self.name], capture_output=True, timeout=120)
        shutil.rmtree(self.folder, ignore_errors=True)

    def log(self) -> str:
        done = subprocess.run(["docker", "logs", self.name], capture_output=True, encoding="utf-8", errors="replace")
        return done.stdout + done.stderr

    def inside(self, *command: str) -> str:
        """``command`` run in the hub's container, as root; its output."""
        return subprocess.run(["docker", "exec", self.name, *command], capture_output=True, encoding="utf-8",
                              check=True, timeout=60).stdout

    def log_in(self, name: str, password: str) -> str:
        """The login form, as a student's browser fills it in: the address the hub sends them to at the end, or Refused."""
        import http.cookiejar
        import re
        import urllib.parse

        browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
        with browser.open(f"{self.url}/hub/login", timeout=60) as page:
            xsrf = re.search(r'name="_xsrf" value="([^"]+)"', page.read().decode()).group(1)
        form = urllib.parse.urlencode({"username": name, "password": password, "_xsrf": xsrf}).encode()
        try:
            with browser.open(f"{self.url}/hub/login", data=form, timeout=120) as landed:
                return landed.geturl()
        except urllib.error.HTTPError as failure:  # a refused login: the form again, with 403
            failure.close()
            raise Refused(failure.code) from None
