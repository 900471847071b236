"""The GitHub Actions workflow: actionlint finds nothing, and it runs the README's test command on
Linux, macOS arm64 and Windows under Python 3.11 and 3.13."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
TESTS_WORKFLOW = ROOT / ".github" / "workflows" / "tests.yml"

# Labels of GitHub-hosted macOS runners on Apple Silicon. macos-13 and the "-intel" and "-large"
# labels are x86_64.
MACOS_ARM64 = re.compile(r"^macos-(latest|1[4-9]|[2-9]\d)(-xlarge)?$")


def _actionlint() -> str | None:
    """actionlint from $ACTIONLINT, PATH, this interpreter's scripts folder or `go install`."""
    exe = "actionlint.exe" if os.name == "nt" else "actionlint"
    candidates = [os.environ.get("ACTIONLINT"), shutil.which("actionlint"),
                  str(Path(sysconfig.get_path("scripts")) / exe), str(Path(sys.executable).parent / exe)]
    gopath = os.environ.get("GOPATH") or str(Path.home() / "go")
    candidates += [str(Path(part) / "bin" / exe) for part in gopath.split(os.pathsep) if part]
    return next((c for c in candidates if c and Path(c).is_file() and os.access(c, os.X_OK)), None)


def test_actionlint_finds_nothing():
    exe = _actionlint()
    if exe is None:
        pytest.skip("actionlint is not installed (e.g. `go install github.com/rhysd/actionlint/cmd/actionlint@latest`)")
    assert WORKFLOWS, "no workflow in .github/workflows"
    result = subprocess.run([exe, "-oneline", "-no-color", *(str(p.relative_to(ROOT)) for p in WORKFLOWS)],
                            cwd=ROOT, capture_output=True, text=True, encoding="utf-8", errors="replace",
                            timeout=120)
    findings = (result.stdout + result.stderr).strip()
    print(findings or "actionlint: no findings")
    assert result.returncode == 0, f"actionlint exit {result.returncode}:\n{findings}"


def _workflow() -> dict:
    return yaml.safe_load(TESTS_WORKFLOW.read_text(encoding="utf-8"))


def _test_job(workflow: dict) -> dict:
    (job,) = [job for job in workflow["jobs"].values() if "matrix" in job.get("strategy", {})]
    return job


def _runner_os(label: str) -> str:
    for prefix, name in (("ubuntu", "Linux"), ("macos", "macOS"), ("windows", "Windows")):
        if label.startswith(prefix):
            return name
    raise AssertionError(f"unknown runner label {label!r}")


def _runs_on(step: dict, runner_os: str) -> bool:
    """Whether a step runs on that OS; only `runner.os == / != '...'` (or no condition) is used."""
    condition = str(step.get("if", "")).strip()
    if condition in ("", "always()"):
        return True
    match = re.fullmatch(r"(?:\$\{\{\s*)?runner\.os\s*(==|!=)\s*'(\w+)'(?:\s*\}\})?", condition)
    assert match, f"condition too complex to check here: {condition!r}"
    return (match[2] == runner_os) == (match[1] == "==")


def test_triggers_on_push_and_pull_request():
    workflow = _workflow()
    triggers = workflow.get("on", workflow.get(True))  # PyYAML (YAML 1.1) reads a bare `on` as True
    assert {"push", "pull_request"} <= set(triggers)


def test_matrix_covers_linux_macos_arm64_windows_and_python_3_11_and_3_13():
    job = _test_job(_workflow())
    matrix = job["strategy"]["matrix"]
    assert job["strategy"]["fail-fast"] is False
    assert 0 < job["timeout-minutes"] <= 90
    assert job["runs-on"] == "${{ matrix.os }}"
    labels = matrix["os"]
    assert any(label.startswith("ubuntu") for label in labels), labels
    assert any(MACOS_ARM64.match(label) for label in labels), labels
    assert any(label.startswith("windows") for label in labels), labels
    assert {"3.11", "3.13"} <= set(matrix["python"]), "write versions as strings: 3.10 as a number is 3.1"


def test_every_os_runs_the_readme_test_command_with_the_ci_profile():
    job = _test_job(_workflow())
    for label in job["strategy"]["matrix"]["os"]:
        runner_os = _runner_os(label)
        steps = [step for step in job["steps"] if "run" in step and _runs_on(step, runner_os)]
        test_steps = [step for step in steps if re.search(r"-m pytest\b", step["run"])]
        assert len(test_steps) == 1, f"{label}: {len(test_steps)} steps run pytest"
        (step,) = test_steps
        script = step["run"]
        assert "-e '.[test]'" in script, f"{label}: the test extras must be installed, quoted"
        if runner_os == "Windows":
            assert step.get("shell") == "pwsh", label
            assert re.search(r"\$env:LABKIT_PROFILE\s*=\s*'ci'", script), label
            assert r".venv\Scripts\python -m pytest" in script, label
        else:
            assert step.get("shell") == "bash", label
            assert "LABKIT_PROFILE=ci .venv/bin/python -m pytest" in script, label


def test_executed_notebooks_and_pytest_output_are_uploaded_even_on_failure():
    job = _test_job(_workflow())
    (upload,) = [step for step in job["steps"] if str(step.get("uses", "")).startswith("actions/upload-artifact@")]
    assert upload["if"] == "always()"
    paths = upload["with"]["path"].split()
    assert "executed/" in paths and "pytest-output.txt" in paths, paths
    assert "${{ matrix.os }}" in upload["with"]["name"] and "${{ matrix.python }}" in upload["with"]["name"]
