"""Ingest many traces at once: one process per trace, up to `workers` at a time.

Each trace still gets its own cached store, built atomically under its own lock
(tracekit.store.ensure_trace_store), so running this beside a sequential ingest of the same
files is safe: the second one to take a trace's lock finds the cache fresh and reuses it.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from tracekit.stages import StageRule
from tracekit.store import IngestResult, ensure_trace_store


def default_workers(n_traces: int) -> int:
    """One worker per core (what this process may use), never more than there are traces."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, n_traces))


def _one(path: Path, rules: list[StageRule], refresh: bool) -> IngestResult:
    return ensure_trace_store(path, rules, refresh)


def ensure_many(
    paths: Sequence[Path],
    rules: Sequence[StageRule] | list[list[StageRule]],
    refresh: bool = False,
    workers: int | None = None,
) -> list[IngestResult]:
    """`ensure_trace_store` for each path, in parallel; results in the order of `paths`.

    `rules` is one rule list for every trace, or one list per trace (as traceset._rules_for
    gives). Errors are raised as the sequential loop would raise them: the first failing
    path in input order wins, after the other workers finish.
    """
    paths = [Path(p) for p in paths]
    per_trace = _per_trace_rules(rules, len(paths))
    n = workers if workers is not None else default_workers(len(paths))
    if n <= 1 or len(paths) <= 1:
        return [_one(p, r, refresh) for p, r in zip(paths, per_trace, strict=True)]
    # fork: children inherit imported modules (fast start); each opens its own DuckDB files.
    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    with ProcessPoolExecutor(max_workers=n, mp_context=ctx) as pool:
        futures = [pool.submit(_one, p, r, refresh) for p, r in zip(paths, per_trace, strict=True)]
        return [f.result() for f in futures]


def _per_trace_rules(
    rules: Sequence[StageRule] | list[list[StageRule]], n: int
) -> list[list[StageRule]]:
    if rules and isinstance(rules[0], list):
        if len(rules) != n:
            raise ValueError(f"got {len(rules)} rule lists for {n} traces")
        return [list(r) for r in rules]  # type: ignore[arg-type]
    return [list(rules) for _ in range(n)]  # type: ignore[arg-type]
