"""Fuzzing the Kineto/Chrome JSON ingest with mutated real traces.

Whatever the bytes, `tracekit.open` either gives a store where `select count(*) from events`
runs, or raises a TracekitError; any other exception is a bug. Bounded for CI (60 examples
per test); `HYPOTHESIS_PROFILE=long` runs 2000.
"""

from __future__ import annotations

import copy
import gzip
import json
import math
import os
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tracekit
from tests.conftest import SAMPLE_TRACES, shared_traces
from tracekit.errors import TracekitError

settings.register_profile(
    "ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "long", max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

EVENTS_KEPT = 300  # a prefix of each real trace keeps one example well under a second


@cache
def seeds() -> list[bytes]:
    """Small real Kineto documents: each trace's metadata plus its first events."""
    paths = shared_traces("kineto_*.json.gz") + [SAMPLE_TRACES / "torch.pt.trace.json"]
    out = []
    for p in paths[:4]:
        raw = p.read_bytes()
        text = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
        doc = json.loads(text)
        if isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list):
            doc["traceEvents"] = doc["traceEvents"][:EVENTS_KEPT]
        out.append(json.dumps(doc).encode())
    return out


pytestmark = pytest.mark.skipif(not seeds(), reason="no Kineto sample traces")


def check(data: bytes, name: str = "t.json") -> None:
    """The property: a valid store or a TracekitError, never anything else."""
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / name
        path.write_bytes(data)
        try:
            ts = tracekit.open(path)
        except TracekitError:
            return
        with ts:
            (n,) = ts.con.execute("select count(*) from events").fetchone()  # type: ignore[misc]
            assert n >= 0
        assert path.read_bytes() == data


# --- byte-level mutations ------------------------------------------------------------------

mutation = st.one_of(
    st.tuples(st.just("flip"), st.floats(0, 1), st.integers(0, 255)),
    st.tuples(st.just("truncate"), st.floats(0, 1), st.just(0)),
    st.tuples(st.just("delete"), st.floats(0, 1), st.integers(1, 64)),
    st.tuples(st.just("splice"), st.floats(0, 1), st.integers(1, 4096)),
    st.tuples(
        st.just("insert"), st.floats(0, 1), st.sampled_from([ord(c) for c in '{}[]",:\\-0eE.nN '])
    ),
)


def mutate(data: bytes, ops: list[tuple[str, float, int]], source: float) -> bytes:
    buf = bytearray(data)
    for op, where, arg in ops:
        if not buf:
            break
        i = min(int(where * len(buf)), len(buf) - 1)
        if op == "flip":
            buf[i] = arg
        elif op == "truncate":
            del buf[i:]
        elif op == "delete":
            del buf[i : i + arg]
        elif op == "splice":  # a slice from elsewhere in the document pasted here
            j = int(source * len(buf))
            buf[i:i] = buf[j : j + arg]
        else:
            buf.insert(i, arg)
    return bytes(buf)


@given(
    seed=st.integers(0, 3),
    ops=st.lists(mutation, min_size=1, max_size=6),
    source=st.floats(0, 1),
    gz=st.booleans(),
)
def test_byte_mutations(seed: int, ops: list[tuple[str, float, int]], source: float, gz: bool):
    base = seeds()[seed % len(seeds())]
    data = mutate(base, ops, source)
    if gz:
        check(gzip.compress(data, 1), "t.json.gz")
    else:
        check(data)


@given(ops=st.lists(mutation, min_size=1, max_size=4), source=st.floats(0, 1))
def test_gzip_stream_mutations(ops: list[tuple[str, float, int]], source: float):
    """Damage to the compressed bytes themselves (CRC, length, deflate blocks)."""
    check(mutate(gzip.compress(seeds()[0], 1), ops, source), "t.json.gz")


# --- structural mutations of parsed events ---------------------------------------------------

ODD_VALUES: list[Any] = [
    None,
    True,
    False,
    "",
    "12",
    "abc",
    "NaN",
    [],
    [1],
    {},
    {"a": 1},
    -1,
    0,
    2**63,
    -(2**63),
    2**70,
    1e300,
    -1e300,
    math.nan,
    math.inf,
    -math.inf,
    1.5,
    -0.0,
    "\u0000",
]
KEYS = ["ph", "ts", "dur", "name", "cat", "pid", "tid", "args", "id", "s", "bp"]
ARG_KEYS = ["correlation", "External id", "stream", "device", "name", "Input Dims"]

edit = st.tuples(
    st.floats(0, 1),  # which event
    st.sampled_from(["delete", "set", "set_arg", "replace_event", "drop_top"]),
    st.sampled_from(KEYS + ARG_KEYS),
    st.sampled_from(range(len(ODD_VALUES))),
)


def apply_edits(doc: Any, edits: list[tuple[float, str, str, int]]) -> Any:
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    for where, op, key, value_i in edits:
        value = copy.deepcopy(ODD_VALUES[value_i])  # shared lists/dicts would make cycles
        if op == "drop_top" and isinstance(doc, dict):
            doc.pop(key if key in doc else next(iter(doc), ""), None)
            continue
        if not isinstance(events, list) or not events:
            continue
        i = min(int(where * len(events)), len(events) - 1)
        ev = events[i]
        if op == "replace_event":
            events[i] = value
        elif not isinstance(ev, dict):
            continue
        elif op == "delete":
            ev.pop(key, None)
        elif op == "set":
            ev[key] = value
        else:
            args = ev.setdefault("args", {})
            if isinstance(args, dict):
                args[key] = value
    return doc


@given(
    seed=st.integers(0, 3),
    edits=st.lists(edit, min_size=1, max_size=12),
    top=st.sampled_from(
        [None, "metadata", "distributedInfo", "deviceProperties", "baseTimeNanoseconds"]
    ),
    top_value=st.sampled_from(range(len(ODD_VALUES))),
)
def test_event_mutations(
    seed: int, edits: list[tuple[float, str, str, int]], top: str | None, top_value: int
):
    doc = json.loads(seeds()[seed % len(seeds())])
    doc = apply_edits(doc, edits)
    if top is not None and isinstance(doc, dict):
        doc[top] = copy.deepcopy(ODD_VALUES[top_value])
    check(json.dumps(doc).encode())  # NaN/Infinity written the way Python writers do


@pytest.mark.parametrize(
    "value", [2**63, 2**70, 1e300, -(2**70), 9.3e15], ids=["2^63", "2^70", "1e300", "-2^70", "9e15"]
)
@pytest.mark.parametrize("key", ["ts", "dur"])
def test_out_of_range_times(key: str, value: float):
    """Times that do not fit int64 nanoseconds: found by the fuzzer, kept as regressions."""
    ev = {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 5, "dur": 1}
    ev[key] = value
    doc = {"traceEvents": [ev, {**ev, "ts": 1, "dur": 1}]}
    check(json.dumps(doc).encode())


@pytest.mark.parametrize("value", [2**64, -(2**64), 2**63])
def test_out_of_range_ids(value: int):
    ev = {
        "ph": "X",
        "cat": "kernel",
        "name": "k",
        "pid": value,
        "tid": value,
        "ts": 5,
        "dur": 1,
        "args": {"correlation": value, "stream": value, "device": value, "External id": value},
    }
    check(json.dumps({"traceEvents": [ev]}).encode())
