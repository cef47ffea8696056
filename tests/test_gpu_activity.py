"""Per-device GPU activity, inferred stages and findings on the real traces, checked against an
independent pass over the raw files (plain json / sqlite3; no tracekit code in the oracle)."""

from __future__ import annotations

import json
import re
import sqlite3
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from conftest import shared_params

import tracekit
from tests.kineto_oracle import load
from tracekit.report.context import build_report_context
from tracekit.report.figures import rounded

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset"}


def _union(intervals: list[tuple[int, int]]) -> int:
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted(i for i in intervals if i[1] > i[0]):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total


def oracle_activity(path: Path) -> dict[int, list[tuple[int, int]]]:
    """Device -> [(start_ns, end_ns)] of every kernel, memcpy and memset in the raw file."""
    out: dict[int, list[tuple[int, int]]] = defaultdict(list)
    if path.suffix == ".sqlite":
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        for t in ("KERNEL", "MEMCPY", "MEMSET"):
            table = f"CUPTI_ACTIVITY_KIND_{t}"
            if table in tables:
                for dev, s, e in con.execute(f'SELECT deviceId, start, "end" FROM {table}'):
                    out[dev].append((s, e))
        con.close()
        return out
    doc = load(path)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    for e in events:
        if e.get("ph") != "X" or str(e.get("cat", "")).lower() not in GPU_CATS:
            continue
        ts, dur = e.get("ts"), e.get("dur")
        if not isinstance(ts, (int, float)) or not isinstance(dur, (int, float)) or dur < 0:
            continue
        dev = (e.get("args") or {}).get("device", -1)
        start = round(ts * 1000)
        out[int(dev) if dev is not None else -1].append((start, start + round(dur * 1000)))
    return out


@pytest.mark.parametrize("trace", shared_params("*.sqlite") + shared_params("*.json.gz"))
def test_per_device_busy_categories_and_findings_match_the_raw_file(trace: Path) -> None:
    """busy = independent union per device (0.1%); categories add up to the plain sum; report,
    SQL and diff agree; a device busy under half its active span gets a finding with a cause."""
    src = trace
    expected = oracle_activity(trace)
    with tracekit.open(src) as ts:
        devs = ts.query("gpu_devices").to_dicts()
        cats = ts.query("gpu_categories").to_dicts()
        util = ts.query("gpu_utilization").to_dicts()
        diff_busy = ts.query("compare_gpu_busy").to_dicts()[0]["busy_ms"]
        ctx = build_report_context(ts)
    findings = {f.id: f for f in ctx.traces[0].findings}
    report_devices = ctx.traces[0].figures["gpu"]["per_device"]
    assert {d["device"] for d in devs} == set(expected)
    for d in devs:
        ivs = expected[d["device"]]
        busy_ns = _union(ivs)
        assert d["busy_ms"] * 1e6 == pytest.approx(busy_ns, rel=1e-3), d["device"]
        plain_ns = sum(e - s for s, e in ivs)
        assert d["activity_ms"] * 1e6 == pytest.approx(plain_ns, rel=1e-3, abs=1)
        by_cat = json.loads(d["by_category_json"])
        assert sum(by_cat.values()) * 1e6 == pytest.approx(plain_ns, rel=1e-6, abs=1)
        rows = [c for c in cats if c["device"] == d["device"]]
        assert sum(c["count"] for c in rows) == len(ivs)  # each activity in exactly one
        assert d["exposed_communication_ms"] <= d["communication_ms"] + 1e-9
        # the headline window: the device's active span, its first to last GPU activity
        active_ns = max(e for _, e in ivs) - min(s for s, _ in ivs)
        assert d["active_ms"] * 1e6 == pytest.approx(active_ns, rel=1e-3, abs=1)
        if busy_ns < 0.5 * active_ns and active_ns >= 1e6:
            f = findings[f"gpu_low_utilization:{d['device']}"]
            assert "likely cause" in f.evidence and f.next_step and f.query == "gpu_devices"
    assert [r["busy_ms"] for r in report_devices] == [rounded(d["busy_ms"]) for d in devs]
    # one definition: the trace figure of report/SQL equals diff's, the sum over devices
    total = sum(_union(v) for v in expected.values()) / 1e6
    trace_row = next((r for r in util if r["scope"] == "trace"), None)
    if expected:
        assert trace_row is not None and trace_row["busy_ms"] == pytest.approx(total, rel=1e-3)
        assert diff_busy == pytest.approx(total, rel=1e-3)


_OP_SUFFIX = re.compile(r",\s*(seq|op_id|sizes)\s*=.*$")


def oracle_kineto_ext_ops(path: Path) -> dict[int, str]:
    """event_id -> launching op of each GPU activity whose External id some cpu_op carries:
    the first such cpu_op in the file, per-call suffixes removed."""
    doc = load(path)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    first_op: dict[object, str] = {}
    for e in events:
        ext = (e.get("args") or {}).get("External id")
        if e.get("ph") == "X" and e.get("cat") == "cpu_op" and ext not in (None, 0):
            first_op.setdefault(ext, e.get("name", ""))
    out = {}
    for i, e in enumerate(events, 1):
        ext = (e.get("args") or {}).get("External id")
        if e.get("ph") == "X" and str(e.get("cat", "")).lower() in GPU_CATS and ext in first_op:
            out[i] = _OP_SUFFIX.sub("", first_op[ext])
    return out


def oracle_nsys_nvtx_ops(path: Path) -> tuple[dict[tuple[int, int], str], int]:
    """(start, correlationId) of each kernel -> the innermost NVTX push/pop range around the
    runtime call that launched it (same correlation id and process, range on the same thread,
    the shortest that encloses the call), suffixes removed; and how many kernels have one."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    names = dict(con.execute("SELECT id, value FROM StringIds"))
    ranges: dict[int, list[tuple[int, int, str]]] = defaultdict(list)
    for s, e, tid, text, sid in con.execute(
        'SELECT start, "end", globalTid, text, textId FROM NVTX_EVENTS '
        'WHERE eventType = 59 AND "end" IS NOT NULL'
    ):
        ranges[tid].append((s, e, text if text is not None else names.get(sid, "")))
    runtime = {}
    for corr, tid, s, e in con.execute(
        'SELECT correlationId, globalTid, start, "end" FROM CUPTI_ACTIVITY_KIND_RUNTIME'
    ):
        runtime[(tid >> 24, corr)] = (tid, s, e)
    out = {}
    for start, corr, pid in con.execute(
        "SELECT start, correlationId, globalPid >> 24 FROM CUPTI_ACTIVITY_KIND_KERNEL"
    ):
        call = runtime.get((pid, corr))
        if call is None:
            continue
        tid, s, e = call
        around = [r for r in ranges[tid] if r[0] <= s and r[1] >= e]
        if around:
            out[(start, corr)] = _OP_SUFFIX.sub("", min(around, key=lambda r: r[1] - r[0])[2])
    con.close()
    return out, len(out)


@pytest.mark.parametrize("trace", shared_params("kineto_*.json.gz"))
def test_launch_op_of_kineto_activity_is_its_external_id_cpu_op(trace: Path) -> None:
    """events.launch_op, derived at ingest, against a plain pass over the JSON."""
    expected = oracle_kineto_ext_ops(trace)
    with tracekit.open(trace) as ts:
        got = dict(ts.con.execute(
            "SELECT event_id, launch_op FROM events WHERE kind IN ('kernel', 'memcpy', 'memset')"
        ).fetchall())  # fmt: skip
    assert {i: got.get(i) for i in expected} == expected
    if "qwen1.5" in trace.name:
        assert len(expected) > 1000  # the check saw the trace's kernels, not none of them


def oracle_graph_replayed(path: Path) -> dict[int, int]:
    """event index -> index of the cudaGraphLaunch/hipGraphLaunch whose correlation id each
    kernel carries, for the kernels with no External id (replayed from a graph: no cpu_op)."""
    doc = load(path)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    launches = {
        (e.get("args") or {}).get("correlation"): i
        for i, e in enumerate(events, 1)
        if e.get("ph") == "X" and e.get("cat") == "cuda_runtime" and "GraphLaunch" in e["name"]
    }
    return {
        i: launches[a["correlation"]]
        for i, e in enumerate(events, 1)
        if e.get("ph") == "X"
        and e.get("cat") == "kernel"
        and (a := e.get("args") or {}).get("External id") is None
        and a.get("correlation") in launches
    }


@pytest.mark.parametrize("trace", shared_params("kineto_*graph*.json.gz"))
def test_graph_replayed_kernels_link_to_their_graph_launch(trace: Path) -> None:
    """Kernels replayed from a CUDA/HIP graph have no launching cpu_op (no External id): each
    links to the one graph launch with its correlation id, as a plain pass over the JSON finds."""
    expected = oracle_graph_replayed(trace)
    assert len(expected) > 300  # the SGLang decode steps replay hundreds of kernels each
    with tracekit.open(trace) as ts:
        got = dict(ts.con.execute(
            "SELECT k.event_id, k.launch_id FROM events k WHERE k.kind = 'kernel' "
            "AND k.event_id IN (SELECT unnest($ids::BIGINT[]))",
            {"ids": list(expected)},
        ).fetchall())  # fmt: skip
    assert got == expected


@pytest.mark.parametrize("trace", shared_params("nsys_2026_h100x2_torch_emit_nvtx*.sqlite"))
def test_launch_op_of_nsys_kernel_is_the_nvtx_range_around_its_launch(trace: Path) -> None:
    """emit_nvtx traces: a kernel's launch_op is the innermost NVTX range around the runtime
    call that launched it (the op's own range), as a plain sqlite3 pass finds it."""
    expected, n = oracle_nsys_nvtx_ops(trace)
    with tracekit.open(trace) as ts:
        got = {
            (s, c): op
            for s, c, op in ts.con.execute(
                "SELECT start_ns, correlation, launch_op FROM events WHERE kind = 'kernel'"
            ).fetchall()
        }
    assert n > 1000
    assert {k: got.get(k) for k in expected} == expected


@pytest.mark.parametrize("trace", shared_params("nsys_2026_h100x2_torch_emit_nvtx*.sqlite"))
def test_top_kernels_counts_emit_nvtx_ops_not_calls(trace: Path) -> None:
    """top_kernels on an emit_nvtx trace: launched_by is the op that launched the kernel most
    often (the innermost NVTX range around the launch, per-call suffixes cut, as the plain
    sqlite3 pass finds it) and launch_ops counts ops, not calls (`aten::add, op_id = N`)."""
    expected, _ = oracle_nsys_nvtx_ops(trace)
    with tracekit.open(trace) as ts:
        kernels = ts.con.execute(
            "SELECT start_ns, correlation, coalesce(stage, '(no stage)'), name FROM events "
            "WHERE kind = 'kernel'"
        ).fetchall()
        rows = ts.query("top_kernels", limit=10**6).to_dicts()
    ops: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    for start, corr, stage, name in kernels:
        if (start, corr) in expected:
            ops[(stage, name)][expected[(start, corr)]] += 1
    assert sum(r["launch_ops"] for r in rows) < len(kernels) / 10  # ops, not one per call
    for r in rows:
        named = ops[(r["stage"], r["name"])]
        assert r["launch_ops"] == len(named), r
        top = max(named.values(), default=0)
        tied = sorted(op for op, n in named.items() if n == top)
        assert r["launched_by"] == (tied[0] if tied else None), r


@pytest.mark.parametrize("trace", shared_params("nsys_2026_h100x2_mfu_*.sqlite"))
def test_two_gpu_trace_rows_devices_and_nccl(trace: Path) -> None:
    src = trace
    with tracekit.open(src) as ts:
        devs = ts.query("gpu_devices").to_dicts()
        ov = ts.query("trace_overview").to_dicts()[0]
        nccl = ts.sql(
            "SELECT DISTINCT category FROM tk_gpu_activity(1) WHERE name ILIKE '%nccl%'"
        ).to_dicts()
        ctx = build_report_context(ts)
    assert [d["device"] for d in devs] == [0, 1]
    assert ov["device_names"] == "GPU 0, GPU 1"
    assert nccl == [{"category": "communication"}]
    assert all(d["communication_ms"] > 0 for d in devs)
    per_device = ctx.traces[0].figures["gpu"]["per_device"]
    assert [p["busy_ms"] for p in per_device] == [rounded(d["busy_ms"]) for d in devs]
    assert set(per_device[0]) >= {"device", "name", "busy_ms", "utilization", "by_category",
                                  "communication_ms", "exposed_communication_ms"}  # fmt: skip


@pytest.mark.parametrize("trace", shared_params("kineto_h100_*.json.gz"))
def test_module_traces_get_inferred_stages_covering_half_of_each_request(trace: Path) -> None:
    src = trace
    doc = load(trace)
    events = doc["traceEvents"]
    assert any(str(e.get("name", "")).startswith("nn.Module: ") for e in events)
    steps = [e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")
             and e.get("ph") == "X" and e.get("cat") == "user_annotation"]  # fmt: skip
    with tracekit.open(src) as ts:
        reqs = ts.sql("SELECT request_id, dur_ns, source FROM requests").to_dicts()
        cover = ts.query("request_breakdown").to_dicts()
        stages = ts.query("stage_summary").to_dicts()
        ops = ts.query("top_ops").to_dicts()
        kernels = ts.query("top_kernels").to_dicts()
    assert len(reqs) == len(steps) and all(r["source"] == "ProfilerStep" for r in reqs)
    for r, step in zip(reqs, sorted(steps, key=lambda e: e["ts"]), strict=True):
        assert r["dur_ns"] == pytest.approx(step["dur"] * 1000, abs=1)
    for r in cover:
        assert r["unattributed_ms"] <= 0.5 * r["e2e_ms"], r
    named = [s for s in stages if s["row_kind"] == "stage"]
    assert named and all(s["source"].startswith("inferred:modules depth ") for s in named)
    stage_names = {s["stage"] for s in named}
    assert stage_names & {o["stage"] for o in ops}
    assert stage_names & {k["stage"] for k in kernels}


@pytest.mark.parametrize("trace", shared_params("kineto_h100_bert*.json.gz"))
def test_stage_depth_option_picks_the_module_depth(trace: Path, copy_trace) -> None:
    from tracekit.store.stages import depth_rule

    src = copy_trace(trace)
    with tracekit.open(src, stage_rules=[depth_rule(2)]) as ts:
        rows = ts.sql("SELECT DISTINCT stage, source FROM stages ORDER BY 1").to_dicts()
    assert rows == [
        {"stage": "BertModel", "source": "inferred:modules depth 2"},
        {"stage": "BertOnlyMLMHead", "source": "inferred:modules depth 2"},
    ]


def test_short_names_and_emit_nvtx_grouping() -> None:
    import duckdb

    from tracekit.categories import install
    from tracekit.store.build import create_schema

    con = duckdb.connect()
    create_schema(con)
    install(con)

    def one(sql: str) -> str:
        row = con.execute(sql).fetchone()
        assert row is not None
        return str(row[0])

    assert one("SELECT tk_op_name('aten::addmm, seq = 47588, op_id = 999618')") == "aten::addmm"
    assert one("SELECT tk_op_name('aten::to, op_id = 317177')") == "aten::to"
    assert (
        one(
            "SELECT tk_kernel_name('void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, "
            "128, 64, 4, false, false, cutlass::bfloat16_t>, true>(Flash_fwd_params)')"
        )
        == "flash_fwd_kernel<…>"
    )
    assert (
        one(
            "SELECT tk_kernel_name('void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_"
            "s161616gemm_bf16_32x32_128x2_tn_align8>(cutlass_80_wmma_tensorop_bf16_s161616gemm_"
            "bf16_32x32_128x2_tn_align8::Params)')"
        )
        == "cutlass::Kernel2<…cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8"
        "…>"
    )
    assert (
        one(
            "SELECT tk_kernel_name('void at::native::(anonymous namespace)::CatArrayBatchedCopy"
            "<int, unsigned int, 3, 128, 1>(int*, int)')"
        )
        == "CatArrayBatchedCopy<…>"
    )
    assert one("SELECT tk_kernel_name('ncclDevKernel_SendRecv(ncclDevKernelArgs4K)')") == (
        "ncclDevKernel_SendRecv"
    )
