"""The class hub's files agree with each other (docker/hub): the names each one repeats from another."""

import re
from pathlib import Path

import yaml

HUB = Path(__file__).resolve().parents[2] / "docker" / "hub"
CONFIG = (HUB / "jupyterhub_config.py").read_text(encoding="utf-8")


def config_value(name: str) -> str:
    return re.search(rf'^{name} = "([^"]+)"', CONFIG, re.MULTILINE).group(1)


def test_kubernetes_pods_open_the_same_labs_folder_and_first_lab_as_the_one_machine_hub():
    values = yaml.safe_load((HUB / "z2jh-values.yaml").read_text(encoding="utf-8"))["singleuser"]
    folder = config_value("LABS_FOLDER")
    assert values["defaultUrl"] == f"/lab/tree/{folder}/00-start-here.ipynb"
    assert f'"$HOME/{folder}"' in " ".join(values["lifecycleHooks"]["postStart"]["exec"]["command"])
    assert values["extraEnv"]["HOME"] == values["storage"]["homeMountPath"]


def test_the_image_runs_the_config_it_copies_and_the_compose_file_builds_that_image():
    dockerfile = (HUB / "Dockerfile").read_text(encoding="utf-8")
    copied = re.search(r"^COPY docker/hub/jupyterhub_config.py (\S+)", dockerfile, re.MULTILINE).group(1)
    workdir = re.search(r"^WORKDIR (\S+)", dockerfile, re.MULTILINE).group(1)
    assert f'"{workdir}/{copied.lstrip("./")}jupyterhub_config.py"' in dockerfile.splitlines()[-1]
    service = yaml.safe_load((HUB / "compose.yaml").read_text(encoding="utf-8"))["services"]["hub"]
    assert service["build"] == {"context": "../..", "dockerfile": "docker/hub/Dockerfile",
                                # the official base unless LABKIT_DOCKER_PYTHON names a stand-in
                                "args": {"PYTHON_IMAGE": "${LABKIT_DOCKER_PYTHON:-python:3.12-slim-trixie}"}}
    assert re.search(r"^ARG PYTHON_IMAGE=python:3.12-slim-trixie$", dockerfile, re.MULTILINE)
    assert service["ports"] == ["127.0.0.1:8000:8000"]  # nothing on the network unless the instructor says so
