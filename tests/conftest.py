"""Shared fixtures: the real traces of ../shared/traces, copied into tmp dirs before use."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

# Every test (and every tracekit process a test starts) caches its stores here, never in the
# user's ~/.cache: the suite starts from an empty cache and leaves nothing behind. One folder
# for the whole run: the first pytest process (xdist's controller, or a plain run) makes it and
# its workers inherit it through the environment, so a read-only shared trace is ingested once
# per run, not once per test (two workers building the same store take turns on the store's
# own lock on the source). Tests of the cache itself use a cache folder of their own.
_RUN_CACHE_ENV = "TRACEKIT_TEST_RUN_CACHE"
_MADE_RUN_CACHE = _RUN_CACHE_ENV not in os.environ
if _MADE_RUN_CACHE:
    os.environ[_RUN_CACHE_ENV] = tempfile.mkdtemp(prefix="tracekit-test-cache-")
TEST_CACHE_DIR = Path(os.environ[_RUN_CACHE_ENV])
os.environ["TRACEKIT_CACHE_DIR"] = str(TEST_CACHE_DIR)
# One DuckDB thread a connection: `make test` runs a worker a core, and every core is busy for
# the whole run, so a second thread a query only adds contention (~11% more CPU on the query
# tests). tests/test_threads.py holds every query's rows to the same on 1 thread and on 4.
os.environ.setdefault("TRACEKIT_THREADS", "1")

REPO = Path(__file__).resolve().parent.parent
SHARED_TRACES = REPO.parent / "shared" / "traces"
SAMPLE_TRACES = REPO / "sample_traces"


def shared_traces(pattern: str) -> list[Path]:
    if not SHARED_TRACES.is_dir():
        return []
    return sorted(SHARED_TRACES.glob(pattern))


def shared_params(pattern: str) -> list[object]:
    """Parametrize over shared traces; one skipped case when the folder is absent."""
    found = shared_traces(pattern)
    if not found:
        return [pytest.param(None, marks=pytest.mark.skip(reason=f"{SHARED_TRACES} is absent"))]
    return [pytest.param(p, id=p.name) for p in found]


@pytest.fixture
def copy_trace(tmp_path: Path):  # type: ignore[no-untyped-def]
    """Copy a trace into tmp_path: a fresh path, so a fresh store (tests of ingest, progress,
    other ingest options, outputs written beside the input). A test that only reads a shared
    trace opens the trace itself: its store is then built once per run for every worker."""

    def _copy(src: Path) -> Path:
        dst = tmp_path / src.name
        shutil.copyfile(src, dst)
        return dst

    return _copy


# The files that take longest (measured with --durations on a 2-core machine), longest first.
# `make test` runs `--dist loadfile --no-loadscope-reorder`: xdist then hands files to the
# workers in collection order, so these start first and no worker finishes the run alone on
# one of them (by default xdist starts the files with the most tests first, and a file of one
# long test, like test_readme.py, came last). Scheduling only: no test depends on the order.
RUN_FIRST = (
    "test_spark.py",
    "test_queries.py",
    "test_report.py",
    "test_over_traces.py",
    "test_hf_service.py",
    "test_gpu_activity.py",
    "test_report_browser.py",
    "test_readme.py",
    "test_capture_selfprofile.py",
    "test_capture.py",
    "test_bad_inputs.py",
    "test_categories.py",
    "test_crash_safety.py",
    "test_diff_percall.py",
    "test_serving_examples.py",
    "test_roofline_capture.py",
    "test_nsys_ingest.py",
    "test_hostile_io.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(RUN_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: file order kept


def pytest_unconfigure(config: pytest.Config) -> None:
    if _MADE_RUN_CACHE:  # the controller, after its workers: theirs is the same folder
        shutil.rmtree(TEST_CACHE_DIR, ignore_errors=True)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true", help="Rewrite golden files.")
