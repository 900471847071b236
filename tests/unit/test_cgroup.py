"""The CPU and memory a process may use on a cgroup v2 host whose cgroup is a folder below the mount."""

from labkit import profiles


def _tree(tmp_path):
    (tmp_path / "cgroup.controllers").write_text("cpu memory", encoding="utf-8")
    (tmp_path / "cpu.max").write_text("max 100000", encoding="utf-8")  # the root: no limit
    (tmp_path / "memory.max").write_text("max", encoding="utf-8")
    slice_ = tmp_path / "class.slice"
    own = slice_ / "student-7.scope"
    own.mkdir(parents=True)
    (slice_ / "cpu.max").write_text("150000 100000", encoding="utf-8")  # 1.5 CPUs for the slice
    (own / "cpu.max").write_text("max 100000", encoding="utf-8")
    (slice_ / "memory.max").write_text(str(3 * 2**30), encoding="utf-8")
    (own / "memory.max").write_text(str(2 * 2**30), encoding="utf-8")
    (own / "cpu.stat").write_text("usage_usec 2500000\n", encoding="utf-8")
    return own


def test_the_tightest_limit_on_the_way_up_holds(tmp_path):
    own = _tree(tmp_path)
    folders = profiles.cgroup_folders(tmp_path, "0::/class.slice/student-7.scope\n")
    assert folders == [own, own.parent, tmp_path]
    cpus, memory = profiles.machine_size(tmp_path, "0::/class.slice/student-7.scope\n")
    import os
    available = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert cpus == min(1.5, available) and memory == 2 * 2**30


def test_inside_a_namespace_the_mount_is_the_process_own_cgroup(tmp_path):
    _tree(tmp_path)
    assert profiles.cgroup_folders(tmp_path, "0::/\n") == [tmp_path]
    # a path of the host's that is not visible here: the mount's root is this process's cgroup
    assert profiles.cgroup_folders(tmp_path, "0::/elsewhere/not-here\n") == [tmp_path]


def test_cgroup_v1_or_no_cgroups_has_no_folders(tmp_path):
    assert profiles.cgroup_folders(tmp_path, "0::/\n") == []


def test_the_usage_under_a_limit_is_read_where_the_limit_is_set(tmp_path):
    own = _tree(tmp_path)
    assert profiles.limiting_cgroup(tmp_path, "0::/class.slice/student-7.scope\n") == own.parent
    (own / "cpu.max").write_text("50000 100000", encoding="utf-8")  # now the scope's own half CPU is tighter
    assert profiles.limiting_cgroup(tmp_path, "0::/class.slice/student-7.scope\n") == own
    assert profiles.limiting_cgroup(tmp_path, "0::/\n") is None  # the root sets no limit
