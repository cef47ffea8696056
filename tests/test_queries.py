"""Every query in queries/ against real and synthetic stores, checked against independent
computations: plain Python over the JSON file (json module), never the queries themselves."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from pathlib import Path

import pytest

import tracekit
from tests.conftest import shared_params
from tests.kineto_oracle import load
from tests.synth_kineto import generate
from tracekit.sql import all_queries

GPU_CATS = {"kernel", "gpu_memcpy", "memcpy", "gpu_memset", "memset"}


def _events(path: Path) -> list[dict]:
    doc = load(path)
    evs = doc["traceEvents"] if isinstance(doc, dict) else doc
    return [e for e in evs if e.get("ph") == "X" and isinstance(e.get("dur"), (int, float))]


def _islands(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """The union of the intervals as disjoint islands (touching ones merge), in order."""
    out: list[list[float]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def _merge(intervals: Iterable[tuple[float, float]]) -> float:
    return sum(e - s for s, e in _islands(intervals))


@pytest.fixture(scope="module")
def synth(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate(tmp_path_factory.mktemp("synth") / "synth.json.gz", requests=12, layers=3)


def _all_queries_run(path: Path) -> dict[str, list[dict]]:
    out = {}
    with tracekit.open(path) as t:
        for name in all_queries():
            out[name] = t.query(name).to_dicts()
    return out


def test_every_query_runs_on_synthetic(synth: Path) -> None:
    res = _all_queries_run(synth)
    assert set(res) >= {
        "stage_summary",
        "request_breakdown",
        "top_ops",
        "top_kernels",
        "gpu_utilization",
        "idle_gaps",
        "memcpy_summary",
        "launch_overhead",
        "trace_overview",
        "stage_attributes",
    }
    # rows only with attributes / call facts / Python events / generation steps / batches,
    # which the synthetic trace lacks (tests/test_hf_service.py, test_serving_* and
    # test_serving.py run them on real captures), or allocator events (tests/test_memory.py)
    empty_here = {"stage_attributes", "padding_waste", "python_functions", "sequence_lengths",
                  "generation_requests", "memory_peaks", "memory_timeline", "serving_requests",
                  "serving_waterfall"}  # fmt: skip
    for name, rows in res.items():
        if name not in empty_here:
            assert rows, name


@pytest.mark.parametrize("trace", shared_params("kineto_*.json.gz"))
def test_every_query_runs_on_shared_and_gpu_busy_matches_interval_merge(trace: Path) -> None:
    path = trace
    res = _all_queries_run(path)
    gpu = [
        (round(e["ts"] * 1000), round(e["ts"] * 1000) + round(e["dur"] * 1000))
        for e in _events(path)
        if str(e.get("cat", "")).lower() in GPU_CATS and e["dur"] > 0 and e["ts"] >= 0
    ]
    busy = next(r for r in res["gpu_utilization"] if r["scope"] == "trace")["busy_ms"]
    # Epoch-µs timestamps (~1.7e15) times 1000 exceed 2**53: the ingestor's float conversion
    # may be off by a few hundred ns per event on such traces.
    assert busy == pytest.approx(_merge(gpu) / 1e6, abs=1e-6 + len(gpu) * 1e-3)
    # Kernel totals (over all stages) equal a json pass.
    kns: dict[str, float] = defaultdict(float)
    for e in _events(path):
        if str(e.get("cat", "")).lower() == "kernel":
            kns[e["name"]] += round(e["dur"] * 1000)
    with tracekit.open(path) as t:
        rows = t.query("top_kernels", limit=10**6).to_dicts()
    got: dict[str, float] = defaultdict(float)
    for r in rows:
        got[r["name"]] += r["total_ms"] * 1e6
    assert set(got) == set(kns)
    for name, ns in kns.items():
        assert got[name] == pytest.approx(ns, abs=1.0 + 1024 * len(rows)), name


def test_stage_figures_match_json_pass(synth: Path) -> None:
    evs = _events(synth)
    reqs = sorted((e["ts"], e["ts"] + e["dur"]) for e in evs if e["name"] == "tracekit:request")
    stages = [
        (e["name"][9:], e["ts"], e["ts"] + e["dur"])
        for e in evs
        if e["name"].startswith("tracekit:") and e["name"] != "tracekit:request"
    ]
    with tracekit.open(synth) as t:
        summary = {r["stage"]: r for r in t.query("stage_summary").to_dicts()}
        breakdown = t.query("request_breakdown").to_dicts()
    for name in {s for s, _, _ in stages}:
        total_us = sum(e - s for n, s, e in stages if n == name)
        assert summary[name]["total_ms"] == pytest.approx(total_us / 1e3)
        per_req = sorted(
            sum(e - s for n, s, e in stages if n == name and r0 <= s < r1) for r0, r1 in reqs
        )
        assert summary[name]["max_ms"] == pytest.approx(per_req[-1] / 1e3)
        assert summary[name]["count"] == len(reqs)
    unattributed = []
    for (r0, r1), row in zip(reqs, breakdown, strict=True):
        inside = [(max(s, r0), min(e, r1)) for _, s, e in stages if r0 <= s < r1]
        unattributed.append((r1 - r0) - _merge(inside))
        assert row["unattributed_ms"] == pytest.approx(unattributed[-1] / 1e3)
        assert row["e2e_ms"] == pytest.approx((r1 - r0) / 1e3)
    assert summary["unattributed"]["total_ms"] == pytest.approx(sum(unattributed) / 1e3)
    assert summary["end_to_end"]["total_ms"] == pytest.approx(sum(r1 - r0 for r0, r1 in reqs) / 1e3)


def test_gpu_busy_per_stage_is_a_union_not_a_sum(synth: Path) -> None:
    """Stage GPU busy vs a Python merge of the GPU events whose launching op lies in the stage."""
    evs = _events(synth)
    stages = [
        (e["name"][9:], e["ts"], e["ts"] + e["dur"])
        for e in evs
        if e["name"].startswith("tracekit:") and e["name"] != "tracekit:request"
    ]
    launches = {e["args"]["correlation"]: e["ts"] for e in evs if e["cat"] == "cuda_runtime"}
    per_stage: dict[str, list[tuple[float, float]]] = defaultdict(list)
    plain: dict[str, float] = defaultdict(float)
    for e in evs:
        if e["cat"] in GPU_CATS:
            t0 = launches[e["args"]["correlation"]]
            name = next(n for n, s, en in stages if s <= t0 <= en)
            per_stage[name].append((e["ts"], e["ts"] + e["dur"]))
            plain[name] += e["dur"]
    with tracekit.open(synth) as t:
        rows = {r["stage"]: r for r in t.query("stage_summary").to_dicts()}
    for name, ivs in per_stage.items():
        assert rows[name]["gpu_busy_ms"] == pytest.approx(_merge(ivs) / 1e3)
    assert rows["inference"]["gpu_busy_ms"] < plain["inference"] / 1e3  # two streams overlap


def test_top_ops_total_counts_outermost_only(synth: Path) -> None:
    evs = [e for e in _events(synth) if e["name"] == "model_forward"]
    outer = [
        e
        for e in evs
        if not any(
            o is not e and o["ts"] <= e["ts"] and o["ts"] + o["dur"] >= e["ts"] + e["dur"]
            for o in evs
        )
    ]
    with tracekit.open(synth) as t:
        row = t.query("top_ops", limit=100).filter(name="model_forward").to_dicts()[0]
    assert row["calls"] == len(evs)
    assert row["total_ms"] == pytest.approx(sum(e["dur"] for e in outer) / 1e3)


def test_memcpy_and_launch_overhead(synth: Path) -> None:
    evs = _events(synth)
    copies = [e for e in evs if e["cat"] == "gpu_memcpy"]
    with tracekit.open(synth) as t:
        mem = {r["direction"]: r for r in t.query("memcpy_summary").to_dicts()}
        launch = {r["api"]: r for r in t.query("launch_overhead").to_dicts()}
    htod = [e for e in copies if "HtoD" in e["name"]]
    assert mem["HtoD"]["count"] == len(htod)
    assert mem["HtoD"]["bytes"] == sum(e["args"]["bytes"] for e in htod)
    assert mem["HtoD"]["sync_count"] == 0 and mem["DtoH"]["sync_count"] == mem["DtoH"]["count"]
    assert mem["HtoD"]["pageable_count"] == len(htod)
    runtime = [e for e in evs if e["cat"] == "cuda_runtime"]
    assert launch["(all runtime)"]["calls"] == len(runtime)
    assert launch["(all runtime)"]["api_ms"] == pytest.approx(sum(e["dur"] for e in runtime) / 1e3)


def _gpu_intervals(path: Path, positive_only: bool) -> list[tuple[int, int, str]]:
    return [
        (round(e["ts"] * 1000), round(e["ts"] * 1000) + round(e["dur"] * 1000), e["name"])
        for e in _events(path)
        if str(e.get("cat", "")).lower() in GPU_CATS
        and e["ts"] >= 0
        and (e["dur"] > 0 or not positive_only)
    ]


@pytest.mark.parametrize("trace", ["synth", *shared_params("kineto_*.json.gz")])
def test_idle_gaps_match_python_pass(trace, synth: Path) -> None:
    path = synth if trace == "synth" else trace
    # zero-length activities are not busy: they split no gap (the 1 us-rounded memcpys of the
    # gp100 trace sit inside its longest gap)
    gpu = _gpu_intervals(path, positive_only=True)
    islands = _islands((s, e) for s, e, _ in gpu)
    gaps = sorted(
        ((b[0] - a[1], a[1], b[0]) for a, b in zip(islands, islands[1:], strict=False)),
        reverse=True,
    )
    with tracekit.open(path) as t:
        rows = t.query("idle_gaps", limit=10).filter(kind="between").to_dicts()
        start_ns = t.sql("SELECT start_ns FROM traces").item()
    assert [r["gap_ms"] for r in rows] == pytest.approx(
        [g / 1e6 for g, _, _ in gaps[:10]], abs=1e-3
    )
    # Equal gaps may rank in either order: each row is matched to its gap by where it starts
    # (within 1 us: epoch-us timestamps lose a few hundred ns in either conversion).
    for r in rows:
        g0 = start_ns + r["gap_start_ms"] * 1e6
        (match,) = [
            g for g in gaps if abs(g[1] - g0) < 1000 and abs(g[0] / 1e6 - r["gap_ms"]) < 1e-3
        ]
        assert r["before"] in {n for _, e, n in gpu if e == match[1]}
        assert r["after"] in {n for s, _, n in gpu if s == match[2]}


STEP_TRACES = (  # traces whose requests are their ProfilerStep#N annotations
    "kineto_h100_vit_nsfw_imgcls_profile_memory_tracelens.json.gz",
    "kineto_ampere_torchrec_2of128ranks_sampled_hta/sampled_rank-1.json.gz",
    "kineto_v100_resnet50_train_pt1.9_legacy_cats_tbplugin.json.gz",
)


@pytest.mark.parametrize("trace", [p for name in STEP_TRACES for p in shared_params(name)])
def test_idle_gaps_lead_in_and_tail_of_each_step_match_python_pass(trace) -> None:
    """Lead-in = a step's start to its first GPU activity, tail = its last GPU activity to its
    end, by a plain pass over the JSON (steps: the ProfilerStep#N events; GPU activity: the
    union of positive-length kernels, copies and memsets)."""
    path = trace
    evs = _events(path)
    us = lambda x: round(x * 1000)  # noqa: E731 (us -> ns, as the ingest rounds)
    islands = _islands(
        (us(e["ts"]), us(e["ts"]) + us(e["dur"]))
        for e in evs
        if str(e.get("cat", "")).lower() in GPU_CATS and e["dur"] > 0
    )
    steps = sorted(
        (us(e["ts"]), us(e["ts"]) + us(e["dur"]))
        for e in evs
        if str(e["name"]).startswith("ProfilerStep#") and e.get("cat") != "gpu_user_annotation"
    )
    lead, tail = {}, {}
    for n, (r0, r1) in enumerate(steps, 1):
        inside = [(max(s, r0), min(e, r1)) for s, e in islands if s < r1 and e > r0]
        if inside:
            lead[n] = (inside[0][0] - r0) / 1e6
            tail[n] = (r1 - max(e for _, e in inside)) / 1e6
    assert lead, "the trace has steps with GPU activity"
    with tracekit.open(path) as t:
        assert t.sql("SELECT DISTINCT source FROM requests")["source"].to_list() == ["ProfilerStep"]
        rows = t.query("idle_gaps", limit=100).to_dicts()
    got = {k: {r["request_id"]: r["gap_ms"] for r in rows if r["kind"] == k}
           for k in ("lead-in", "tail")}  # fmt: skip
    for kind, want in (("lead-in", lead), ("tail", tail)):
        want = {n: ms for n, ms in want.items() if ms > 0}
        assert got[kind] == pytest.approx(want, abs=2e-3), kind
    # what the host does in a lead-in is never the step itself
    assert all(
        not str(r["host_op"] or "").startswith("ProfilerStep#")
        for r in rows
        if r["kind"] != "between"
    )


def test_gpu_busy_per_request_matches_python_pass(synth: Path) -> None:
    islands = _islands((s, e) for s, e, _ in _gpu_intervals(synth, positive_only=True))
    reqs = sorted(
        (round(e["ts"] * 1000), round(e["ts"] * 1000) + round(e["dur"] * 1000))
        for e in _events(synth)
        if e["name"] == "tracekit:request"
    )
    with tracekit.open(synth) as t:
        rows = t.query("gpu_utilization").filter(scope="request").sort("request_id").to_dicts()
    assert len(rows) == len(reqs)
    for (r0, r1), row in zip(reqs, rows, strict=True):
        busy = sum(max(0, min(e, r1) - max(s, r0)) for s, e in islands)
        assert row["busy_ms"] == pytest.approx(busy / 1e6, abs=1e-6)
        assert row["window_ms"] == pytest.approx((r1 - r0) / 1e6, abs=1e-6)


def _launching_ops(path: Path) -> dict[tuple[str, str], Counter]:
    """(stage, kernel name) -> Counter of launching cpu_op names, by a plain pass over the JSON:
    the runtime call with the kernel's correlation id, its enclosing events on its thread (a
    stack per thread), the nearest cpu_op of its first 8 ancestors, else the first cpu_op with
    the kernel's External id; the stage from the nearest enclosing tracekit:<stage> range."""
    evs = [dict(e, idx=i) for i, e in enumerate(_events(path))]
    host = [e for e in evs if isinstance(e.get("tid"), int) and str(e.get("cat")).lower()
            not in GPU_CATS | {"gpu_user_annotation"}]  # fmt: skip
    parent: dict[int, dict] = {}
    by_thread: dict[tuple, list[dict]] = defaultdict(list)
    for e in host:
        by_thread[(e.get("pid"), e["tid"])].append(e)
    for rows in by_thread.values():
        stack: list[dict] = []
        for e in sorted(rows, key=lambda e: (e["ts"], -e["dur"], e["idx"])):
            while stack and stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"]:
                stack.pop()
            if stack:
                parent[e["idx"]] = stack[-1]
            stack.append(e)
    launch: dict[int, dict] = {}
    for e in sorted(host, key=lambda e: e["ts"]):
        corr = (e.get("args") or {}).get("correlation")
        if str(e.get("cat")).lower() in ("cuda_runtime", "cuda_driver") and corr:
            launch.setdefault(corr, e)  # a driver call inside a runtime call: the outer one
    first_op_of_ext: dict[int, str] = {}
    for e in evs:
        ext = (e.get("args") or {}).get("External id")
        if e.get("cat") == "cpu_op" and ext:
            first_op_of_ext.setdefault(ext, e["name"])
    out: dict[tuple[str, str], Counter] = defaultdict(Counter)
    for k in evs:
        if k.get("cat") != "kernel":
            continue
        r = launch.get((k.get("args") or {}).get("correlation"))
        op = stage = None
        a, level = parent.get(r["idx"]) if r else None, 0
        while a is not None:
            level += 1
            if op is None and level <= 8 and a.get("cat") == "cpu_op":
                op = a["name"]
            if (
                stage is None
                and a["name"].startswith("tracekit:")
                and a["name"] != "tracekit:request"
            ):
                stage = a["name"][9:]
            a = parent.get(a["idx"])
        if op is None:
            op = first_op_of_ext.get((k.get("args") or {}).get("External id"))
        out[(stage or "(no stage)", k["name"])][op] += 1
    return out


@pytest.mark.parametrize(
    "trace",
    ["synth", *shared_params("kineto_h100_*.json.gz")],
)
def test_top_kernels_launched_by_matches_python_pass(trace, synth: Path) -> None:
    path = synth if trace == "synth" else trace
    want = _launching_ops(path)
    with tracekit.open(path) as t:
        rows = t.query("top_kernels", limit=10**6).to_dicts()
        inferred = t.sql("SELECT count(*) AS n FROM stages WHERE source LIKE 'inferred:%'")
    if inferred["n"][0]:  # no tracekit stages, so tracekit inferred some: check per kernel
        assert {s for s, _ in want} == {"(no stage)"}
        counts: Counter = Counter()
        for r in rows:
            counts[r["name"]] += r["count"]
            ops = {op for op in want[("(no stage)", r["name"])] if op is not None}
            assert r["launched_by"] in ops | {None}  # None: no op launched this stage's ones
            assert r["launch_ops"] <= len(ops)
        assert counts == Counter({n: sum(ops.values()) for (_, n), ops in want.items()})
        return
    assert {(r["stage"], r["name"]) for r in rows} == set(want)
    for r in rows:
        ops = want[(r["stage"], r["name"])]
        assert r["count"] == sum(ops.values())
        named = {op: n for op, n in ops.items() if op is not None}
        assert r["launch_ops"] == len(named)
        top = max(named.values(), default=0)
        tied = sorted(op for op, n in named.items() if n == top)
        assert r["launched_by"] == (tied[0] if tied else None)  # a tie: the smallest name
