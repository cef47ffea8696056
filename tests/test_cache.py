"""The cache: stores live in the cache directory, never beside an input; a changed, moved or
replaced input is never answered from a stale store; `tracekit cache` lists, sizes, clears
and prunes least recently used first."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests import procs
from tests.conftest import REPO, SAMPLE_TRACES
from tracekit.store import cache

KINETO = SAMPLE_TRACES / "torch.pt.trace.json"
NSYS = SAMPLE_TRACES / "nsys.sqlite"


def tracekit(
    *args: str, cache_dir: Path, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "TRACEKIT_CACHE_DIR": str(cache_dir)}
    return procs.run(
        [sys.executable, "-m", "tracekit", *args],
        capture_output=True, text=True, env=env, cwd=cwd or REPO,
    )  # fmt: skip


def count_events(trace: Path, cache_dir: Path) -> int:
    r = tracekit("sql", str(trace), "SELECT count(*) AS n FROM events", "--format", "csv",
                 cache_dir=cache_dir)  # fmt: skip
    assert r.returncode == 0, r.stderr
    return int(r.stdout.split()[1])


def listing(folder: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.iterdir()}


@pytest.fixture
def read_only_run(tmp_path: Path) -> Path:
    """A copy of the sample run folder, made read-only as a shared trace folder is."""
    run = tmp_path / "shared_run"
    shutil.copytree(SAMPLE_TRACES, run)
    for p in [run, *run.rglob("*")]:
        p.chmod(p.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    yield run
    for p in [run, *run.rglob("*")]:
        p.chmod(p.stat().st_mode | stat.S_IWUSR)


def test_read_only_folder_report_sql_query_work_and_write_nothing_there(
    read_only_run: Path, tmp_path: Path
) -> None:
    before = listing(read_only_run)
    cache_dir = tmp_path / "cache"
    work = tmp_path / "cwd"
    work.mkdir()
    r = tracekit("report", str(read_only_run), "--format", "md", cache_dir=cache_dir, cwd=work)
    assert r.returncode == 0, r.stderr
    assert "read-only folder" in r.stderr
    assert r.stdout.strip() == "Wrote shared_run.report.md"
    assert (work / "shared_run.report.md").read_text().startswith("# tracekit report")
    r = tracekit("query", "top_ops", str(read_only_run / "nsys.sqlite"), cache_dir=cache_dir)
    assert r.returncode == 0, r.stderr
    assert listing(read_only_run) == before
    stores = sorted(p.name for p in (cache_dir / "stores").iterdir())
    assert len(stores) == 2 and all(s.endswith(".duckdb") for s in stores), stores


def test_report_default_output_goes_beside_a_writable_input(tmp_path: Path) -> None:
    trace = tmp_path / "t.pt.trace.json"
    shutil.copyfile(KINETO, trace)
    r = tracekit("report", str(trace), "--format", "json", cache_dir=tmp_path / "c")
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c", "t.pt.trace.json", "t.report.json"]


def test_changed_replaced_and_moved_inputs_are_rebuilt(tmp_path: Path) -> None:
    cache_dir = tmp_path / "cache"
    trace = tmp_path / "a.json"
    shutil.copyfile(KINETO, trace)
    n = count_events(trace, cache_dir)
    assert n > 1000
    # Replaced by a copy with the same size and mtime: a new inode says it is another file.
    st = trace.stat()
    copy = tmp_path / "copy.json"
    shutil.copyfile(trace, copy)
    os.utime(copy, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(copy, trace)
    r = tracekit("ingest", str(trace), cache_dir=cache_dir)
    assert r.returncode == 0 and "cached, unchanged" not in r.stdout, r.stdout
    r = tracekit("ingest", str(trace), cache_dir=cache_dir)
    assert "cached, unchanged" in r.stdout, r.stdout
    # Edited in place, mtime restored: ctime still moves.
    with open(trace, "r+b") as f:
        data = f.read()
        f.seek(0)
        f.write(data.replace(b'"traceEvents": [', b'"traceEvents":[ ', 1))
    os.utime(trace, ns=(st.st_atime_ns, st.st_mtime_ns))
    r = tracekit("ingest", str(trace), cache_dir=cache_dir)
    assert r.returncode == 0 and "cached, unchanged" not in r.stdout, r.stdout
    # Moved: another path, another store; the old store is not consulted.
    moved = tmp_path / "sub" / "a.json"
    moved.parent.mkdir()
    trace.rename(moved)
    r = tracekit("ingest", str(moved), cache_dir=cache_dir)
    assert r.returncode == 0 and "cached, unchanged" not in r.stdout, r.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "sub"]


def test_cache_command_lists_sizes_prunes_lru_and_clears(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache_dir = tmp_path / "cache"
    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(cache_dir))
    traces = []
    for name in ("old.json", "mid.json", "new.json"):
        traces.append(tmp_path / name)
        shutil.copyfile(KINETO, traces[-1])
        assert count_events(traces[-1], cache_dir) > 0
    stores = {t.name: cache.store_path_for(t) for t in traces}
    for age, name in ((300, "old.json"), (200, "mid.json"), (100, "new.json")):
        t = stores[name].stat().st_mtime - age
        os.utime(stores[name], (t, t))
    count_events(traces[0], cache_dir)  # reuse marks "old" as most recently used
    r = tracekit("cache", "list", cache_dir=cache_dir)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith(f"{cache_dir}: 3 files, ")
    assert ["mid.json" in lines[1], "new.json" in lines[2], "old.json" in lines[3]] == [True] * 3
    r = tracekit("cache", "size", cache_dir=cache_dir)
    total = sum(p.stat().st_size for p in stores.values())
    assert r.stdout.split("\t")[0] == str(total)
    r = tracekit("cache", "prune", "--max-size", str(total - 1), cache_dir=cache_dir)
    assert r.returncode == 0 and r.stdout.startswith("Removed 1 files"), r.stdout
    assert [p.exists() for p in stores.values()] == [True, False, True]
    r = tracekit("cache", "prune", "--max-size", "lots", cache_dir=cache_dir)
    assert (
        r.returncode == 2
        and r.stderr == "Error: --max-size: 'lots' is not a size (e.g. 500MB, 2GB)\n"
    )
    r = tracekit("cache", "clear", cache_dir=cache_dir)
    assert r.returncode == 0 and r.stdout.startswith("Removed 2 files"), r.stdout
    assert not any(p.exists() for p in stores.values())


def test_max_size_evicts_least_recently_used_after_a_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache_dir = tmp_path / "cache"
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    shutil.copyfile(KINETO, a)
    shutil.copyfile(KINETO, b)
    count_events(a, cache_dir)
    monkeypatch.setenv("TRACEKIT_CACHE_MAX_SIZE", "1")  # tiny: only the store just built stays
    count_events(b, cache_dir)
    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(cache_dir))
    assert not cache.store_path_for(a).exists()
    assert cache.store_path_for(b).name.endswith("-b.json.duckdb")
    assert cache.store_path_for(b).exists()


def test_cache_dir_option_and_env_resolution(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = tmp_path / "t.sqlite"
    shutil.copyfile(NSYS, trace)
    r = tracekit("sql", "--cache-dir", str(tmp_path / "opt"), str(trace), "SELECT 1 AS one",
                 cache_dir=tmp_path / "env")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "opt" / "stores").is_dir() and not (tmp_path / "env").exists()
    monkeypatch.delenv("TRACEKIT_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.cache_dir() == tmp_path / "xdg" / "tracekit"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache.cache_dir() == tmp_path / "home" / ".cache" / "tracekit"
    long = tmp_path / ("n" * 240 + ".json")
    assert len(cache.store_path_for(long).name.encode()) < 160
