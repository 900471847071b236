"""Where run records go: one file per run, even two of one name in one second; the results folder left as it is."""

import os
import stat

import pytest

from labkit import records


def _run(script: str) -> records.Run:
    return records.Run("quick", "nb", "ci", "2026-11-26T10:00:00+00:00", scripts=[{"name": "s", "text": script}])


def test_two_runs_of_one_name_in_one_second_keep_two_records(tmp_path):
    first, second = _run("select 1;"), _run("select 2;")
    first_path, second_path = first.save(tmp_path), second.save(tmp_path)
    assert first_path != second_path
    assert records.Run.load(first_path).scripts[0]["text"] == "select 1;"
    assert records.Run.load(second_path).scripts[0]["text"] == "select 2;"
    # a note on the first writes to its own file, not to the newest of that name
    first.note(answer=42)
    assert records.Run.load(first_path).extra == {"answer": 42} and records.Run.load(second_path).extra == {}
    assert len(list(tmp_path.glob("*.json"))) == 2


@pytest.mark.posix
def test_an_existing_results_folder_keeps_its_permissions_and_a_new_one_is_private(tmp_path):
    private = tmp_path / "mine"
    private.mkdir(mode=0o700)
    private.chmod(0o700)
    _run("select 1;").save(private)
    assert stat.S_IMODE(private.stat().st_mode) == 0o700
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o750)
    _run("select 1;").save(shared)
    assert stat.S_IMODE(shared.stat().st_mode) == 0o750
    made = tmp_path / "made" / "here"
    path = _run("select 1;").save(made)
    assert stat.S_IMODE(made.stat().st_mode) == 0o700 and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert os.access(path, os.R_OK)


def test_runs_saved_in_one_second_list_in_the_order_they_ran(tmp_path):
    """The file names sort stem-2 before stem (and -10 before -2): the listing must not follow them."""
    names = []
    for number in range(1, 12):
        run = records.Run("rep", "nb", "ci", records.now_iso(), repeat=number, repeats=11, series="rep@now")
        run.started_at = run.started_at[:19] + f".{number:06d}+00:00"  # one second, eleven runs
        run.save(tmp_path)
        names.append(run.repeat)
    listed = records.list_runs(tmp_path)
    assert [run.repeat for run in listed] == names
    assert records.latest(listed)["rep"].repeat == 11 and records.latest_groups(listed)["rep"].last.repeat == 11
    old_style = records.Run("old", "nb", "ci", "2026-11-26T10:00:00+00:00")
    old_style.save(tmp_path)
    assert [run.name for run in records.list_runs(tmp_path)][0] == "old"  # written at 10:00, before them


@pytest.mark.posix  # a full disk, made for this process alone with its file-size limit (POSIX's RLIMIT_FSIZE)
def test_a_record_that_does_not_fit_on_the_disk_leaves_the_saved_one_whole(tmp_path):
    import resource

    from labkit.errors import LabkitError

    run = _run("select 1;")
    saved = run.save(tmp_path)
    before = saved.read_text(encoding="utf-8")
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (len(before.encode()) + 100, hard))  # a write past it fails (EFBIG)
    try:
        with pytest.raises(LabkitError, match=r"\(File too large\): .*quick.*json keeps what it held"):
            run.note(notes="x" * 10_000)
        with pytest.raises(LabkitError, match=r"nothing was written"):
            _run("select 2; -- " + "x" * 10_000).save(tmp_path)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert saved.read_text(encoding="utf-8") == before  # not half of the new one
    assert records.Run.load(saved).extra == {}
    assert [path.name for path in tmp_path.iterdir()] == [saved.name]  # no half-written file beside it


def test_a_record_is_on_disk_before_it_replaces_the_saved_one(tmp_path, monkeypatch):
    """A crash between the replace and the kernel's own write-back must leave the old record or the new, never an empty file."""
    calls = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append("fsync"), real_fsync(fd))[1])
    monkeypatch.setattr(os, "replace", lambda a, b: (calls.append("replace"), real_replace(a, b))[1])
    path = _run("select 1;").save(tmp_path)
    assert calls[-2:] == ["fsync", "replace"]
    calls.clear()
    records.Run.load(path).note(answer=1)
    assert calls[-2:] == ["fsync", "replace"]


def test_an_unreadable_record_is_said_at_every_listing_not_once(tmp_path):
    """Python shows a warning once per place by default: a record left out must be said each time runs are listed."""
    import subprocess
    import sys

    _run("select 1;").save(tmp_path)
    (tmp_path / "cut-short.json").write_text('{"name": "x", "note', encoding="utf-8")
    code = ("import pathlib, sys; from labkit import records\n"
            "for _ in range(3): print(len(records.list_runs(pathlib.Path(sys.argv[1]))))")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONWARNINGS": ""})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "1", "1"]
    assert done.stderr.count("left out of the runs listed") == 3, done.stderr
