"""Crash safety of the cache: kill -9 mid-ingest, and two ingests of one trace at once.

A killed `tracekit ingest --refresh` leaves the old complete cache (or none); the next run
recovers by itself and sweeps the dead build's temp file. The input never changes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from tests import procs
from tests.conftest import REPO
from tracekit.store.cache import store_path_for

EVENTS = 200_000  # about 1-2 s of ingest on one core


def write_trace(path: Path, n: int = EVENTS) -> None:
    row = '{"ph":"X","cat":"cpu_op","name":"aten::op%d","pid":1,"tid":%d,"ts":%d,"dur":3}'
    with open(path, "w") as f:
        f.write('{"schemaVersion": 1, "traceEvents": [\n')
        f.write(",\n".join(row % (i % 50, i % 4, i * 5) for i in range(n)))
        f.write("\n]}\n")


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO)}


def ingest(path: Path, *extra: str) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "tracekit", "ingest", *extra, str(path)]
    return subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env()
    )


def finish(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = procs.communicate(proc)
    return proc.returncode, out, err


def fingerprint(path: Path) -> tuple[bytes, int]:
    return path.read_bytes(), path.stat().st_mtime_ns


def cache_of(path: Path) -> Path:
    return store_path_for(path)


def count_events(store: Path) -> int:
    con = duckdb.connect(str(store), read_only=True)
    try:
        (n,) = con.execute("SELECT count(*) FROM events").fetchone()  # type: ignore[misc]
        return int(n)
    finally:
        con.close()


def temps(folder: Path) -> list[str]:
    if not folder.is_dir():
        return []
    return sorted(p.name for p in folder.iterdir() if ".tmp" in p.name)


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Its own cache folder: the suite's run-wide cache holds other tests' builds in progress,
    # whose temp files are not this test's leftovers.
    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    (tmp_path / "in").mkdir()
    path = tmp_path / "in" / "big.json"
    write_trace(path)
    return path


@pytest.mark.parametrize("with_old_cache", [True, False], ids=["old_cache", "no_cache"])
def test_kill_9_mid_ingest(trace: Path, with_old_cache: bool):
    before = fingerprint(trace)
    cache = cache_of(trace)
    if with_old_cache:
        assert finish(ingest(trace))[0] == 0
        old = fingerprint(cache)
    proc = ingest(trace, "--refresh")
    while not temps(cache_of(trace).parent):  # the build's temp store: it is mid-ingest now
        assert proc.poll() is None, "ingest finished before a temp file was seen"
        time.sleep(0.005)
    os.kill(proc.pid, signal.SIGKILL)
    procs.communicate(proc)
    assert proc.returncode == -signal.SIGKILL
    assert fingerprint(trace) == before
    if with_old_cache:
        assert fingerprint(cache) == old  # the old complete cache, untouched
        assert count_events(cache) == EVENTS
    else:
        assert not cache.exists()
    # The next run recovers by itself and sweeps the dead build's temp file.
    code, out, err = finish(ingest(trace))
    assert code == 0, err
    assert ("cached, unchanged" in out) == with_old_cache, out
    assert count_events(cache) == EVENTS
    assert temps(cache_of(trace).parent) == []
    assert fingerprint(trace) == before


@pytest.mark.parametrize("refresh", [False, True], ids=["plain", "refresh"])
def test_two_ingests_at_once(trace: Path, refresh: bool):
    before = fingerprint(trace)
    extra = ("--refresh",) if refresh else ()
    procs = [ingest(trace, *extra) for _ in range(2)]
    results = [finish(p) for p in procs]
    for code, _out, err in results:
        assert code == 0, err
        assert "Traceback" not in err
    outs = [out for _, out, _ in results]
    if not refresh:  # one built it, the other waited on the lock and reused it
        assert sum("cached, unchanged" in o for o in outs) == 1, outs
    assert count_events(cache_of(trace)) == EVENTS
    assert temps(cache_of(trace).parent) == []
    assert sorted(p.name for p in trace.parent.iterdir()) == [
        trace.name
    ]  # nothing beside the input
    assert fingerprint(trace) == before
