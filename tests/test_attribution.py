"""Stage and request attribution against a plain-Python pass over the JSON: every host event
takes the innermost stage (and request) range open at its start on its thread - the one that
started last among those containing it - and every kernel that of the runtime call that
launched it. Stages nest (an op after `attention` ends, inside `inference`), share start
times, and on other threads overlap without nesting (as NVTX start/end ranges can), in pairs
and tangled any way."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

import tracekit


def _x(cat: str, name: str, tid: int, ts: int, dur: int, **args: Any) -> dict[str, Any]:
    ev: dict[str, Any] = {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts,
                          "dur": dur}  # fmt: skip
    if args:
        ev["args"] = args
    return ev


def _nested(rng: random.Random, tid: int, start: int, end: int, depth: int,
            out: list[dict[str, Any]]) -> None:  # fmt: skip
    """Properly nested tracekit stage ranges and ops inside [start, end)."""
    t = start
    while t < end - 4:
        length = rng.randint(2, max(2, (end - t) // 2))
        if depth < 3 and rng.random() < 0.5:
            stage = rng.choice(["inference", "attention", "kv", "mlp"])
            begin = t if rng.random() < 0.3 else t + rng.randint(0, 1)  # (shared starts)
            out.append(_x("user_annotation", f"tracekit:{stage}", tid, begin, length))
            _nested(rng, tid, begin, begin + length, depth + 1, out)
        else:
            out.append(_x("cpu_op", f"op{len(out)}", tid, t, rng.randint(0, length)))
        t += length + rng.randint(0, 3)


def _trace(seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    events: list[dict[str, Any]] = []
    t = 0
    for _ in range(12):  # thread 1: requests with nested stages
        length = rng.randint(60, 200)
        events.append(_x("user_annotation", "tracekit:request", 1, t, length))
        _nested(rng, 1, t, t + length, 0, events)
        t += length + rng.randint(0, 30)
    t = 0
    for k in range(20):  # thread 2: pairs of stage ranges that overlap without nesting
        first = rng.randint(5, 60)
        second = rng.randint(1, first - 1)  # (starts inside the first, ends after it)
        events.append(_x("user_annotation", f"tracekit:s{k % 3}", 2, t, first))
        events.append(_x("user_annotation", "tracekit:other", 2, t + second, first))
        t += second + first + rng.randint(0, 20)
    for _ in range(300):
        events.append(_x("cpu_op", "loose", 2, rng.randint(0, t + 10), rng.randint(0, 3)))
    for k in range(60):  # thread 3: start/end ranges tangled any way
        begin = rng.randint(0, 1500)
        events.append(_x("user_annotation", f"tracekit:t{k % 4}", 3, begin, rng.randint(0, 120)))
    for _ in range(400):
        events.append(_x("cpu_op", "tangled", 3, rng.randint(0, 1600), rng.randint(0, 3)))
    for i, ev in enumerate(e for e in list(events) if e["cat"] == "cpu_op"):
        if i % 4 == 0:  # a launch from some ops, and its kernel
            events.append(_x("cuda_runtime", "cudaLaunchKernel", ev["tid"], ev["ts"], 0,
                             correlation=i + 1))  # fmt: skip
            events.append({"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7,
                           "ts": ev["ts"] + 5, "dur": 1,
                           "args": {"correlation": i + 1, "device": 0, "stream": 7}})  # fmt: skip
    return events


def _innermost(ranges: list[tuple[int, int, int, Any]], tid: int, ts: int) -> Any:
    """Of the ranges (tid, start, end, value) containing ts on tid: the one started last
    (for equal starts the shorter, then the later in the file)."""
    best = None
    for i, (rtid, start, end, value) in enumerate(ranges):
        if rtid == tid and start <= ts <= end:
            key = (start, -(end - start), i)
            if best is None or key > best[0]:
                best = (key, value)
    return best[1] if best else None


@pytest.mark.parametrize("seed", range(6))
def test_stage_and_request_of_each_event_match_python_pass(seed: int, tmp_path: Path) -> None:
    events = _trace(seed)
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    stages = [(e["tid"], e["ts"], e["ts"] + e["dur"], e["name"][9:]) for e in events
              if e["name"].startswith("tracekit:") and e["name"] != "tracekit:request"]  # fmt: skip
    requests = [(e["tid"], e["ts"], e["ts"] + e["dur"], e["ts"]) for e in events
                if e["name"] == "tracekit:request"]  # fmt: skip
    launch = {e["args"]["correlation"]: e for e in events if e["cat"] == "cuda_runtime"}
    expected = []
    for e in events:
        host = launch[e["args"]["correlation"]] if e["cat"] == "kernel" else e
        request_start = _innermost(requests, host["tid"], host["ts"])
        expected.append((e["cat"], e["name"], e["ts"] * 1000,
                         _innermost(stages, host["tid"], host["ts"]), request_start))  # fmt: skip
    with tracekit.open(path) as t:
        got = t.sql(
            """SELECT e.args->>'cat' AS cat, e.kind, e.name, e.start_ns, e.stage,
                      r.start_ns // 1000 AS request_start
               FROM events e LEFT JOIN requests r USING (trace_id, request_id)
               ORDER BY e.event_id"""
        ).rows()
    assert len(got) == len(expected)
    nested_after_inner = 0
    for (cat, name, start, stage, request), row in zip(expected, got, strict=True):
        assert (row[2], row[3]) == (name, start)
        assert (row[4], row[5]) == (stage, request), (cat, name, start)
        nested_after_inner += stage is not None and cat == "cpu_op"
    assert nested_after_inner > 50


@pytest.mark.parametrize("seed", range(4))
def test_stage_rules_keep_the_outermost_hits_like_a_python_pass(seed: int, tmp_path: Path) -> None:
    """`--stage NAME=REGEX` stages: every host op/range whose name matches, less those that
    another hit of the same stage on the same thread contains (of equal intervals, the first
    in the file stays) - nested, tangled, shared starts and ends, identical intervals."""
    import re

    from tracekit.store.stages import parse_rule

    rng = random.Random(seed)
    names = ("pre_tokenize", "pre_pad", "infer_forward", "infer_layer", "post_decode", "other")
    events = []
    for _ in range(400):
        tid = rng.choice((1, 2, 3))
        ts = rng.randint(0, 300)
        dur = rng.choice((0, 1, 5, 20, 60))
        cat = rng.choice(("cpu_op", "cpu_op", "user_annotation", "python_function"))
        events.append(_x(cat, rng.choice(names), tid, ts, dur))
        if rng.random() < 0.1:  # the same interval again, later in the file
            events.append(dict(events[-1]))
    path = tmp_path / "rules.json"
    path.write_text(json.dumps({"traceEvents": events}))
    rules = [parse_rule("preprocess=^pre_"), parse_rule("inference=infer"),
             parse_rule("postprocess=decode$")]  # fmt: skip
    hits = [(rule.stage, e["tid"], e["ts"], e["ts"] + e["dur"], i)
            for i, e in enumerate(events, 1) for rule in rules
            if re.search(rule.pattern, e["name"])]  # fmt: skip

    def contained(h: tuple[str, int, int, int, int]) -> bool:
        return any(o[:2] == h[:2] and o[4] != h[4] and o[2] <= h[2] and o[3] >= h[3]
                   and (o[2] < h[2] or o[3] > h[3] or o[4] < h[4]) for o in hits)  # fmt: skip

    expected = sorted((h[0], h[4]) for h in hits if not contained(h))
    with tracekit.open(path, stage_rules=rules) as t:
        got = t.sql("SELECT stage, event_id FROM stages ORDER BY stage, event_id").rows()
    assert got == expected
    assert len(expected) > 30 and len(expected) < len(hits)


@pytest.mark.parametrize("seed", range(4))
def test_parent_stage_is_the_innermost_other_stage_holding_the_range(
    seed: int, tmp_path: Path
) -> None:
    """stages.parent_stage against a plain-Python pass over the stages and requests tables:
    the innermost range of another stage on the same thread that contains it (larger, or of
    equal length and earlier), looked for in its own request first, then among the ranges
    outside every request or ending after their request - nested, tangled, shared starts."""
    events = _trace(seed)
    for k in range(3):  # thread 1: ranges outside the requests that hold some of them
        events.append(_x("user_annotation", f"tracekit:outer{k}", 1, k * 400, 500 + k * 300))
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    with tracekit.open(path) as t:
        stages = t.sql("SELECT event_id, stage, start_ns, end_ns, dur_ns, coalesce(pid, -1) AS pid,"
                       " tid, request_id, parent_stage FROM stages").to_dicts()  # fmt: skip
        req_end = dict(t.sql("SELECT request_id, end_ns FROM requests").rows())
    assert len(stages) > 100

    def holds(p: dict[str, Any], c: dict[str, Any]) -> bool:
        larger = p["dur_ns"] > c["dur_ns"] or (
            p["dur_ns"] == c["dur_ns"] and p["event_id"] < c["event_id"]
        )
        return (p["tid"] == c["tid"] and p["pid"] == c["pid"] and p["stage"] != c["stage"]
                and p["start_ns"] <= c["start_ns"] and p["end_ns"] >= c["end_ns"]
                and larger)  # fmt: skip

    def innermost(cands: list[dict[str, Any]]) -> set[str]:  # (equal lengths: any of them)
        shortest = min((p["dur_ns"] for p in cands), default=None)
        return {p["stage"] for p in cands if p["dur_ns"] == shortest}

    straddling = [p for p in stages
                  if p["request_id"] is None or p["end_ns"] > req_end[p["request_id"]]]  # fmt: skip
    parented = 0
    for c in stages:
        if c["tid"] is None:
            continue
        near = innermost([p for p in stages if p["request_id"] == c["request_id"] and holds(p, c)])
        far = innermost([p for p in straddling
                         if p["request_id"] != c["request_id"] and holds(p, c)])  # fmt: skip
        want = near or far or {None}
        assert c["parent_stage"] in want, c
        parented += c["parent_stage"] is not None
    assert parented > 30 and parented < len(stages)
