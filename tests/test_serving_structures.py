"""Stages from how serving code is written (tracekit/serving_structures.toml), held to plain
passes over the shared traces' own frames and markers: string tests written here, not the
vocabulary's regexes, and the kernels replayed from graphs to the stage of their launch."""

from __future__ import annotations

import functools
from collections import defaultdict
from pathlib import Path

import pytest
from conftest import shared_params, shared_traces

import tracekit
from tests.kineto_oracle import load
from tracekit.errors import ConfigError
from tracekit.structures import builtin_structures, parse_structures

Range = tuple[int, float, float, object, object]  # (event index, start µs, end µs, pid, tid)


@functools.cache  # the tests of a trace read it several times (~1 s a parse); none writes it
def _events(path: Path) -> list[dict]:
    doc = load(path)
    return doc["traceEvents"] if isinstance(doc, dict) else doc


def _complete(events: list[dict]) -> list[tuple[int, dict]]:
    return [(i, e) for i, e in enumerate(events, 1) if e.get("ph") == "X" and "dur" in e]


def _outermost(ranges: list[Range]) -> list[Range]:
    """Ranges not inside another of the list on the same thread."""
    out: list[Range] = []
    for r in sorted(ranges, key=lambda r: (r[3], r[4], r[1], -r[2])):
        if out and out[-1][3:] == r[3:] and out[-1][2] >= r[2]:
            continue
        out.append(r)
    return out


def _frame(name: str, file_part: str, function: str) -> bool:
    """A Python frame 'path/file.py(LINE): function' in a file whose path has file_part."""
    path, sep, fn = name.rpartition("): ")
    return bool(sep) and fn == function and file_part in path


def oracle_sglang(path: Path) -> dict[str, list[Range]]:
    ranges: dict[str, list[Range]] = defaultdict(list)
    for i, e in _complete(_events(path)):
        name, cat = str(e["name"]), e.get("cat")
        r = (i, e["ts"], e["ts"] + e["dur"], e.get("pid"), e.get("tid"))
        if cat == "user_annotation" and name.startswith("step[DECODE"):
            ranges["decode"].append(r)
        elif cat == "python_function" and _frame(name, "managers/scheduler.py",
                                                   "get_next_batch_to_run"):  # fmt: skip
            ranges["schedule"].append(r)
        elif cat == "python_function" and _frame(name, "managers/scheduler.py",
                                                   "process_batch_result"):  # fmt: skip
            ranges["process_output"].append(r)
    return {k: _outermost(v) for k, v in ranges.items()}


def oracle_diffusers(path: Path) -> dict[str, list[Range]]:
    events = _complete(_events(path))
    calls = [(i, e) for i, e in events
             if e.get("cat") == "python_function" and _frame(e["name"], "diffusers/pipelines/",
                                                              "__call__")]  # fmt: skip
    ranges: dict[str, list[Range]] = defaultdict(list)
    for _, call in calls:
        s, t = call["ts"], call["ts"] + call["dur"]
        inside = [
            (i, e)
            for i, e in events
            if e.get("cat") == "python_function"
            and e.get("tid") == call.get("tid")
            and s <= e["ts"]
            and e["ts"] + e["dur"] <= t
        ]
        loop = []
        for i, e in inside:
            name = e["name"]
            r = (i, e["ts"], e["ts"] + e["dur"], e.get("pid"), e.get("tid"))
            if _frame(name, "diffusers/pipelines/", "encode_prompt"):
                ranges["encode_prompt"].append(r)
            elif _frame(name, "diffusers/models/autoencoders/", "decode"):
                ranges["vae_decode"].append(r)
            elif _frame(name, "diffusers/image_processor.py", "postprocess"):
                ranges["postprocess"].append(r)
            elif (_frame(name, "diffusers/pipelines/", "prepare_latents")
                  or _frame(name, "diffusers/pipelines/", "retrieve_timesteps")
                  or _frame(name, "diffusers/schedulers/scheduling_", "step")):  # fmt: skip
                loop.append(r)
        if loop:  # the denoising loop: from its set-up to the scheduler's last step
            start, end = min(r[1] for r in loop), max(r[2] for r in loop)
            ranges["denoise"].append((min(loop)[0], start, end, call.get("pid"), call.get("tid")))
    return {k: _outermost(v) for k, v in ranges.items()}


def _cases() -> list[object]:
    found = [(p, "sglang-step", oracle_sglang)
             for p in shared_traces("kineto_*_sglang_*decode*.json.gz")]  # fmt: skip
    found += [(p, "diffusers-pipeline", oracle_diffusers)
              for p in shared_traces("kineto_*flux*diffusers*.json.gz")]  # fmt: skip
    if not found:
        return [pytest.param(None, None, None, marks=pytest.mark.skip(reason="no shared traces"))]
    return [pytest.param(*c, id=c[0].name) for c in found]


CASES = _cases()


def _stage_rows(src: Path) -> tuple[list[dict], list[dict]]:
    with tracekit.open(src) as ts:
        stages = ts.sql("SELECT stage, dur_ns, source, event_id FROM stages").to_dicts()
        summary = ts.query("stage_summary").to_dicts()
    return stages, summary


@pytest.mark.parametrize(("trace", "structure", "oracle"), CASES)
def test_structure_stages_equal_the_traces_own_frames_and_markers(
    trace: Path, structure: str, oracle
) -> None:
    expected = oracle(trace)
    assert expected, "the trace holds the structure's frames/markers"
    stages, summary = _stage_rows(trace)
    assert {s["source"] for s in stages} == {f"inferred:{structure}"}
    got: dict[str, float] = defaultdict(float)
    for s in stages:
        got[s["stage"]] += s["dur_ns"] / 1e3
    want = {k: sum(r[2] - r[1] for r in v) for k, v in expected.items()}
    assert set(got) == set(want)
    for stage, us in want.items():
        assert got[stage] == pytest.approx(us, rel=0.01), stage
    # the report's host time per stage (its total_ms is the latency, GPU tail included) and
    # shares: of the requests' host time (ProfilerStep, else first to last stage)
    e2e = next(r for r in summary if r["row_kind"] == "end_to_end")["host_ms"]
    for row in summary:
        if row["row_kind"] == "stage":
            assert row["host_ms"] == pytest.approx(want[row["stage"]] / 1e3, rel=0.01)
            assert row["total_ms"] >= row["host_ms"]
            assert row["share"] == pytest.approx(row["host_ms"] / e2e, rel=0.01)


@pytest.mark.parametrize(("trace", "structure", "oracle"), CASES)
def test_graph_replayed_kernels_take_the_stage_of_their_launch(
    trace: Path, structure: str, oracle
) -> None:
    """Each kernel replayed by a cudaGraphLaunch/hipGraphLaunch (its correlation id; CUDA
    leaves them without an External id, ROCm gives them the launch's) is in the stage whose
    range holds its launch on the launching thread, by a plain pass."""
    ranges = [(stage, r) for stage, rs in oracle(trace).items() for r in rs]
    events = _events(trace)
    launch_stage: dict[object, str | None] = {}
    for _, e in _complete(events):
        if e.get("cat") == "cuda_runtime" and "GraphLaunch" in e["name"]:
            holders = [(r[1], st) for st, r in ranges
                       if r[4] == e.get("tid") and r[1] <= e["ts"] <= r[2]]  # fmt: skip
            launch_stage[e["args"]["correlation"]] = max(holders)[1] if holders else None
    expected = {
        i: launch_stage[e["args"]["correlation"]]
        for i, e in _complete(events)
        if e.get("cat") == "kernel" and (e.get("args") or {}).get("correlation") in launch_stage
    }
    assert len(expected) > 300 and any(expected.values())
    with tracekit.open(trace) as ts:
        got = dict(ts.con.execute(
            "SELECT event_id, stage FROM events WHERE kind = 'kernel' "
            "AND event_id IN (SELECT unnest($ids::BIGINT[]))", {"ids": list(expected)},
        ).fetchall())  # fmt: skip
    assert got == expected


@pytest.mark.parametrize("trace", shared_params("kineto_h100_*.json.gz"))
def test_traces_without_a_structure_keep_module_inference(trace: Path) -> None:
    """The TraceLens HF traces run the model's forward under a harness, with no pipeline,
    handler or engine frames: their stages stay those of the nn.Module tree."""
    names = {str(e.get("name")) for e in _events(trace) if e.get("cat") == "python_function"}
    assert not any(_frame(n, "transformers/pipelines/", "preprocess") for n in names)
    stages, _ = _stage_rows(trace)
    assert stages and all(s["source"].startswith("inferred:modules depth ") for s in stages)


def test_vocabulary_parses_and_names_its_structures() -> None:
    names = {s.structure for s in builtin_structures()}
    assert {"hf-pipeline", "handler", "sglang-step", "vllm-step", "diffusers-pipeline",
            "hf-generate", "torch-compile", "triton-python"} <= names  # fmt: skip


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (
            '[[structure]]\nname = "x"\n[[structure.stage]]\nstage = "a"\nmatch = "("\n',
            "bad regular",
        ),
        ('[[structure]]\nname = "x"\n', "needs [[structure.stage]]"),
        (
            '[[structure]]\nname = "x"\n[[structure.stage]]\nstage = "a"\nmatch = "b"\n'
            'step = "z"\n',
            "step must be",
        ),
        ("[[structure]\n", "not valid TOML"),
    ],
)
def test_bad_structure_tables_are_one_line_errors(text: str, needle: str) -> None:
    with pytest.raises(ConfigError, match="tracekit.toml") as err:
        parse_structures(text, "tracekit.toml")
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_user_structures_come_first(tmp_path: Path, copy_trace, monkeypatch) -> None:
    """A [[structure]] in tracekit.toml of the working directory is tried before the built-in
    ones (and joins the store's cache key)."""
    found = shared_traces("kineto_b300_sglang_qwen3*.json.gz")
    if not found:
        pytest.skip("../shared/traces is absent")
    trace = found[0]
    (tmp_path / "tracekit.toml").write_text(
        '[[structure]]\nname = "my-loop"\n[[structure.stage]]\nstage = "batch"\n'
        "match = '^execute_[0-9]+_context'\nkinds = [\"range\"]\n"
    )
    monkeypatch.chdir(tmp_path)
    stages, _ = _stage_rows(copy_trace(trace))
    assert {(s["stage"], s["source"]) for s in stages} == {("batch", "inferred:my-loop")}


def _is_wait(name: str) -> bool:
    """Runtime calls that block the host until the GPU is done (oracle's own spelling)."""
    low = name.lower()
    return "synchronize" in low or name in {"cudaMemcpy", "hipMemcpy", "hipMemcpyWithStream"}


@pytest.mark.parametrize(("trace", "structure", "oracle"), CASES)
def test_host_waits_inside_stages_and_graph_share_equal_a_plain_pass(
    trace: Path, structure: str, oracle
) -> None:
    """Per stage, the blocking runtime calls on its thread inside its ranges (summed; the
    shared traces' waits do not overlap) and the outermost cpu_op around the largest; the
    share of kernel time whose correlation id is a graph launch's."""
    events = _complete(_events(trace))
    ranges = oracle(trace)
    want: dict[str, float] = defaultdict(float)
    ops = [e for _, e in events if e.get("cat") == "cpu_op"]
    top: dict[str, tuple[float, str]] = {}
    for _, e in events:
        if e.get("cat") != "cuda_runtime" or not _is_wait(e["name"]):
            continue
        holders = [(r[1], st) for st, rs in ranges.items() for r in rs
                   if r[4] == e.get("tid") and r[1] <= e["ts"] <= r[2]]  # fmt: skip
        if not holders:
            continue
        stage = max(holders)[1]
        want[stage] += e["dur"]
        around = [o for o in ops if o.get("tid") == e.get("tid")
                  and o["ts"] <= e["ts"] and e["ts"] + e["dur"] <= o["ts"] + o["dur"]]  # fmt: skip
        op = min(around, key=lambda o: o["ts"])["name"] if around else None
        if op and (stage not in top or top[stage][0] < e["dur"]):
            top[stage] = (e["dur"], op)
    launches = {e["args"]["correlation"] for _, e in events
                if e.get("cat") == "cuda_runtime" and "GraphLaunch" in e["name"]}  # fmt: skip
    kernels = [e for _, e in events if e.get("cat") == "kernel"]
    replayed = sum(e["dur"] for e in kernels if e["args"].get("correlation") in launches)
    with tracekit.open(trace) as ts:
        got = {r["stage"]: r for r in ts.query("stage_host_waits").to_dicts()}
        graph = ts.query("graph_replay").to_dicts()[0]
    assert set(got) == set(want)
    for stage, us in want.items():
        assert got[stage]["wait_ms"] == pytest.approx(us / 1e3, rel=0.01)
        if stage in top:
            assert got[stage]["op"] == top[stage][1]
    assert graph["replayed_ms"] == pytest.approx(replayed / 1e3, rel=0.01)
    assert graph["share_of_kernel_time"] == pytest.approx(
        replayed / sum(e["dur"] for e in kernels), rel=0.01
    )
    if "flux" in trace.name:  # the pipeline's postprocess waits for the VAE's image
        assert want["postprocess"] > 0.9 * sum(r[2] - r[1] for r in ranges["postprocess"])


@pytest.mark.parametrize("trace", shared_params("kineto_*_sglang_*decode*.json.gz"))
def test_engine_decode_steps_batch_and_time_per_token_equal_a_plain_pass(trace: Path) -> None:
    """Each step[DECODE bs=N] marker is a decode step of batch N that lasts until the GPU work
    launched inside it (the graph replay) ends: a plain pass over the markers, the runtime
    calls in them and the kernels with those calls' correlation ids."""
    events = _complete(_events(trace))
    steps = [e for _, e in events if e.get("cat") == "user_annotation"
             and e["name"].startswith("step[DECODE")]  # fmt: skip
    assert len(steps) == 1
    step = steps[0]
    s, t = step["ts"], step["ts"] + step["dur"]
    launches = {e["args"]["correlation"] for _, e in events
                if e.get("cat") == "cuda_runtime" and e.get("tid") == step.get("tid")
                and s <= e["ts"] <= t}  # fmt: skip
    gpu_end = max(e["ts"] + e["dur"] for _, e in events
                  if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
                  and (e.get("args") or {}).get("correlation") in launches)  # fmt: skip
    batch = int(step["name"].split("bs=")[1].rstrip("]"))
    with tracekit.open(trace) as ts:
        rows = ts.query("generation_requests").to_dicts()
    assert len(rows) == 1
    r = rows[0]
    assert (r["prefill_steps"], r["decode_steps"], r["batch_size"]) == (0, 1, batch)
    assert r["ttft_ms"] is None and r["output_tokens"] == batch
    assert r["tpot_ms"] == pytest.approx((max(t, gpu_end) - s) / 1e3, rel=0.01)
