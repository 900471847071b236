"""A Docker engine stood in for: what labkit asks of testcontainers, recorded, where no engine runs.

One fake for every test of the docker backend without an engine (tests/unit/test_platform_docker.py,
tests/integration/test_docker_boundary.py); what the real engine does with it is tested where one
answers (tests/integration/test_docker.py).
"""

import time


class FakeWrapped:
    """docker-py's container, as labkit uses it: restarted, reloaded, a status."""

    def __init__(self, log):
        self.log = log
        self.status = "running"

    def restart(self):
        self.log.append(("restart", time.monotonic()))

    def reload(self):
        pass


class FakeContainer:
    """What labkit calls on testcontainers' PostgresContainer, recorded."""

    made: list = []
    images: list = []  # the FakeImage each start built

    def __init__(self, image, **options):
        self.options = options
        self.log = [("image", image)]
        self.env = {}
        self.kwargs = {}
        self.port = 5432
        self.ports = {}
        self.wrapped = FakeWrapped(self.log)
        FakeContainer.made.append(self)

    def with_env(self, name, value):
        self.env[name] = value
        return self

    def with_kwargs(self, **kwargs):
        self.kwargs = kwargs
        return self

    def with_command(self, command):
        self.log.append(("command", command))
        return self

    def start(self):
        self.log.append(("start", time.monotonic()))
        return self

    def stop(self):
        self.log.append(("stop", time.monotonic()))

    def get_wrapped_container(self):
        return self.wrapped

    def get_container_host_ip(self):
        return "docker.example.test"

    def get_exposed_port(self, port):
        return 49153


class FakeImage:
    """testcontainers' DockerImage: built at once."""

    def __init__(self, path, tag, **build_options):
        self.path, self.tag, self.options = path, tag, build_options
        FakeContainer.images.append(self)

    def build(self):
        return self


def fake_engine(monkeypatch) -> list:
    """labkit's docker backend on the fake, as with a local engine that has the base image; the containers made."""
    import testcontainers.community.postgres
    import testcontainers.core.image

    from labkit import docker_backend

    FakeContainer.made.clear()
    FakeContainer.images.clear()
    monkeypatch.delenv("LABKIT_DOCKER_BASE", raising=False)  # the default base, whatever the machine set
    monkeypatch.setattr(docker_backend, "engine_problem", lambda timeout=3.0: None)
    monkeypatch.setattr(docker_backend, "base_problem", lambda base=None, timeout=10.0: None)
    monkeypatch.setattr(docker_backend, "_local_engine", lambda: True)
    monkeypatch.setattr(docker_backend.DockerServer, "_remove_orphans", staticmethod(lambda: None))  # no engine
    monkeypatch.setattr(testcontainers.core.image, "DockerImage", FakeImage)
    monkeypatch.setattr(testcontainers.community.postgres, "PostgresContainer", FakeContainer)
    return FakeContainer.made
