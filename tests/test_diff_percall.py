"""tracekit diff per call: the Δtotal split on pairs where the answer is known, the real nsys
pair against a plain sqlite3 pass, a run folder (nsys + Kineto of one capture) counted once,
and trace strings escaped in every format."""

from __future__ import annotations

import html
import json
import re
import shutil
import sqlite3
import sys
from collections import defaultdict
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import tracekit
from tests.conftest import SAMPLE_TRACES, SHARED_TRACES
from tracekit.cli import main
from tracekit.compare.diff import diff_runs
from tracekit.compare.items import Unit, compare_item
from tracekit.compare.metrics import Calls, ItemStats
from tracekit.compare.render import md_cell, render

BEFORE = SHARED_TRACES / "nsys_2026_h100x2_mfu_before.sqlite"
AFTER = SHARED_TRACES / "nsys_2026_h100x2_mfu_after.sqlite"
needs_mfu = pytest.mark.skipif(not BEFORE.exists(), reason=f"{SHARED_TRACES} is absent")


# --- synthetic pairs: the answer is known ----------------------------------------------------


def kineto(path: Path, steps: int, calls: int, dur_us: int, name: str = "gemm_kernel") -> Path:
    """`steps` ProfilerStep requests, each launching `calls` kernels `name` of `dur_us` µs."""
    ev: list[dict[str, Any]] = []
    t = 1000
    for s in range(steps):
        start = t
        for _ in range(calls):
            ev.append(
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": name,
                    "pid": 0,
                    "tid": 7,
                    "ts": t,
                    "dur": dur_us,
                    "args": {"device": 0, "stream": 7},
                }
            )
            t += dur_us + 10
        ev.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{s}",
                "pid": 1,
                "tid": 1,
                "ts": start,
                "dur": t - start,
            }
        )
        t += 50
    path.write_text(json.dumps({"traceEvents": ev}))
    return path


CASES = {
    # name: (steps, calls per step, µs per call) of the candidate; baseline is (5, 2, 100)
    "more_calls": ((5, 3, 100), "same", 0.5, 0.0),
    "slower_calls": ((5, 2, 150), "slower", 0.0, 0.5),
    "both": ((5, 3, 150), "slower", 0.5, 0.75),
    "more_work_same_per_request": ((10, 2, 100), "same", 1.0, 0.0),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_split_on_known_pairs(tmp_path: Path, case: str) -> None:
    (steps, calls, dur), status, count_part, time_part = CASES[case]
    base = kineto(tmp_path / "base.json", 5, 2, 100)
    cand = kineto(tmp_path / "cand.json", steps, calls, dur)
    d = diff_runs([base], [cand])
    (k,) = d.kernels
    assert k.status == status
    assert (k.before_count, k.after_count) == (10, steps * calls)
    assert k.before_mean_ms == pytest.approx(0.1) and k.after_mean_ms == pytest.approx(dur / 1e3)
    assert k.count_part_ms == pytest.approx(count_part)
    assert k.time_part_ms == pytest.approx(time_part)
    assert k.count_part_ms + k.time_part_ms == pytest.approx(k.delta_ms, abs=1e-12)
    assert d.kernels_unit == Unit("request", 5, steps)
    # Per request: the calls part is the change in calls per request.
    assert k.count_part_per_unit_ms == pytest.approx((calls - 2) * 0.1)
    assert k.time_part_per_unit_ms == pytest.approx(calls * (dur - 100) / 1e3)
    assert k.count_part_per_unit_ms + k.time_part_per_unit_ms == pytest.approx(
        k.delta_per_unit_ms, abs=1e-12
    )
    head = " ".join((d.headline.context, *d.headline.entries, d.headline.note))
    if status == "same":
        assert not d.headline.entries and "No change beyond noise." in head
    else:
        assert d.headline.entries[0].startswith("Kernel gemm_kernel: 0.100 → 0.150 ms per call")


def test_split_is_exact_for_any_figures() -> None:
    for cb, tb, ca, ta in ((3, 1.0, 7, 2.5), (1e6, 123.456789, 999_999, 130.0), (2, 0.2, 2, 0.2)):
        b = ItemStats("k", "", Calls(cb, tb, tb * tb / cb))
        a = ItemStats("k", "", Calls(ca, ta, ta * ta / ca))
        i = compare_item(b, a, Unit("request", 4, 6))
        assert i.count_part_ms + i.time_part_ms == pytest.approx(ta - tb, rel=1e-12, abs=1e-12)
        assert i.count_part_per_unit_ms + i.time_part_per_unit_ms == pytest.approx(
            ta / 6 - tb / 4, rel=1e-12, abs=1e-12
        )
    gone = compare_item(ItemStats("k", "", Calls(2, 1.0, 0.5)), None, Unit("request", 1, 1))
    new = compare_item(None, ItemStats("k", "", Calls(2, 1.0, 0.5)), Unit("request", 1, 1))
    assert (gone.status, gone.count_part_ms, gone.time_part_ms) == ("vanished", -1.0, 0.0)
    assert (new.status, new.count_part_ms, new.time_part_ms) == ("appeared", 1.0, 0.0)


# --- the real nsys pair, against plain sqlite3 -----------------------------------------------


def sqlite_kernels(path: Path) -> dict[str, dict[int, list[int]]]:
    """Kernel durations (ns) by demangled name and device, straight from the export."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    out: dict[str, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    q = (
        'SELECT s.value, k.deviceId, k."end" - k.start FROM CUPTI_ACTIVITY_KIND_KERNEL k '
        "JOIN StringIds s ON s.id = k.demangledName"
    )
    for name, dev, dur in con.execute(q):
        out[name][dev].append(dur)
    con.close()
    return out


def sqlite_busy(path: Path) -> dict[int | None, int]:
    """Per device (and None: all devices) the union of kernel/memcpy/memset intervals, ns."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    iv: dict[int | None, list[tuple[int, int]]] = defaultdict(list)
    for table in ("KERNEL", "MEMCPY", "MEMSET"):
        for dev, s, e in con.execute(
            f'SELECT deviceId, start, "end" FROM CUPTI_ACTIVITY_KIND_{table} WHERE "end" > start'
        ):
            iv[dev].append((s, e))
            iv[None].append((s, e))
    con.close()
    out = {}
    for dev, xs in iv.items():
        total, cur_s, cur_e = 0, None, None
        for s, e in sorted(xs):
            if cur_e is None or s > cur_e:
                total += 0 if cur_e is None else cur_e - cur_s
                cur_s, cur_e = s, e
            else:
                cur_e = max(cur_e, e)
        out[dev] = total + (cur_e - cur_s)
    return out


@pytest.fixture(scope="module")
def mfu() -> tuple[Path, Path]:
    return BEFORE, AFTER  # read only: their stores are built once per run


@needs_mfu
def test_mfu_per_call_figures_match_sqlite3(mfu: tuple[Path, Path]) -> None:
    before, after = mfu
    d = diff_runs([before], [after])
    ob, oa = sqlite_kernels(before), sqlite_kernels(after)
    assert {k.name for k in d.kernels} == ob.keys() | oa.keys()
    for k in d.kernels:
        for side, oracle in (("before", ob), ("after", oa)):
            durs = [x for dev in oracle[k.name].values() for x in dev]
            assert getattr(k, f"{side}_count") == len(durs)
            assert getattr(k, f"{side}_mean_ms") == pytest.approx(sum(durs) / len(durs) / 1e6)
        for dev in k.devices:
            n = int(dev.device.split()[-1])
            assert dev.before_count == len(ob[k.name][n])
            assert dev.after_mean_ms == pytest.approx(sum(oa[k.name][n]) / len(oa[k.name][n]) / 1e6)
        assert k.count_part_ms + k.time_part_ms == pytest.approx(k.delta_ms, abs=1e-9)
    # Per device busy: the union per device, and over all devices, equal a Python merge.
    bb, ba = sqlite_busy(before), sqlite_busy(after)
    got = {dv.device: dv for dv in d.devices}
    for dev in (0, 1):
        assert got[f"GPU {dev}"].busy.before == pytest.approx(bb[dev] / 1e6)
        assert got[f"GPU {dev}"].busy.after == pytest.approx(ba[dev] / 1e6)
    device_time = (bb[0] + bb[1]) / 1e6  # summed over devices, as the report counts it
    assert got["all"].busy.before == pytest.approx(device_time)
    assert d.gpu[0].before == pytest.approx(device_time)
    with tracekit.open(before) as t:  # the report's trace-wide figure is the same sum
        rep = t.query("gpu_utilization").to_dicts()[0]
    assert rep["scope"] == "trace" and rep["busy_ms"] == pytest.approx(device_time)


@needs_mfu
def test_mfu_headline_names_sendrecv_and_not_flash(mfu: tuple[Path, Path]) -> None:
    d = diff_runs(*([p] for p in mfu))
    first = d.headline.entries[0]
    assert first.startswith("Kernel ncclDevKernel_SendRecv")
    assert "0.385 → 0.544 ms per call (+41.4%)" in first
    assert "GPU 0:" in first and "GPU 1:" in first
    flash = next(k for k in d.kernels if "flash_fwd_kernel" in k.name)
    # 68 → 60 calls at the same time per call: the change is all in the number of calls.
    assert flash.status == "same" and abs(flash.per_call_change or 1) < 0.01
    assert abs(flash.count_part_ms) > 30 * abs(flash.time_part_ms)
    assert not any("flash" in e for e in d.headline.entries)
    assert d.kernels[0].name.startswith("ncclDevKernel_SendRecv")  # ranked per call
    assert "calls per s of trace span ×0.90" in d.headline.note
    table = render(d, "table")
    page = render(d, "html")
    assert page.index('id="headline"') < page.index('<figure id="chart">') < page.index("<table")
    bars = re.findall(r"<g><title>([^<]*)</title>", page)
    assert bars[0].startswith("kernel ncclDevKernel_SendRecv") and "unsure" in bars[0]
    assert page.count('class="sortable"') == 2  # GPU per device, kernels (no stages, no ops)
    first_entry = next(ln for ln in table.splitlines() if ln.startswith("  * "))
    assert first_entry.startswith("  * Kernel ncclDevKernel_SendRecv")
    assert table.index(first_entry) < table.index("Kernels compared per call")


@needs_mfu
def test_mfu_per_iteration_range(mfu: tuple[Path, Path]) -> None:
    d = diff_runs([mfu[0]], [mfu[1]], per="ncclGroupStart")
    assert d.kernels_unit == Unit("'ncclGroupStart' range", 66, 60)
    send = d.kernels[0]
    assert send.time_part_per_unit_ms == pytest.approx(send.time_part_ms / 60)
    assert "×0.99 per 'ncclGroupStart' range" in d.headline.note
    r = CliRunner().invoke(main, ["diff", str(mfu[0]), str(mfu[1]), "--per", "nope"])
    assert r.exit_code == 2 and r.stderr.startswith("Error: --per 'nope': the baseline has no")


# --- a run folder: one capture, two tools, counted once -------------------------------------


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("sample") / "run"
    shutil.copytree(SAMPLE_TRACES, d)
    return d


def test_run_folder_diffed_with_itself(sample: Path) -> None:
    d = diff_runs([sample], [sample])
    with tracekit.open(sample / "nsys.sqlite") as t:
        n = t.con.execute("SELECT count(*) FROM requests").fetchone()[0]
    assert n == 12
    assert d.baseline.requests == d.candidate.requests == n
    e2e = next(s for s in d.stages if s.stage == "end_to_end")
    assert e2e.before_count == n
    assert all(m.delta == 0 for s in d.stages for m in s.metrics)
    assert all(i.status == "same" and i.delta_ms == 0 for i in (*d.ops, *d.kernels))
    assert not d.headline.entries and "No change beyond noise." in d.headline.note
    assert "nsys.sqlite" in d.baseline.views[0] and "torch.pt.trace.json" in d.baseline.views[0]
    assert "counted once" in d.baseline.views[0]
    assert d.ops  # CPU ops come from the Kineto view


def test_check_counts_each_request_once(sample: Path) -> None:
    r = CliRunner().invoke(
        main,
        [
            "check",
            str(sample),
            "--budget",
            "end_to_end.count>=12",
            "--budget",
            "end_to_end.count<=12",
        ],
    )
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines() == [
        "PASS end_to_end.count>=12: measured 12 (limit 12)",
        "PASS end_to_end.count<=12: measured 12 (limit 12)",
    ]
    assert "requests and stages, kernels and GPU busy from nsys.sqlite" in r.stderr


# --- hostile names ---------------------------------------------------------------------------

HOSTILE = [
    "<script>alert(1)</script>",
    "[click](http://evil.example/x)",
    "![img](http://evil.example/i.png)",
    "a|b|c",
    "line1\nline2\r\n| injected | row |",
    "**bold** _em_ `code` <img src=x onerror=alert(1)>",
]


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def test_md_cell_is_inert() -> None:
    for name in HOSTILE:
        cell = md_cell(name)
        assert "\n" not in cell and "\r" not in cell and "\x1b" not in cell
        assert "![" not in cell and not _bare(cell, "[]")
        assert all(cell[i - 1] == "\\" for i, ch in enumerate(cell) if ch in "|[]`*<>")
    assert "\\_em_" in md_cell(HOSTILE[5]) and md_cell("aten::copy_") == "aten::copy_"


def test_hostile_names_escaped_in_every_format(tmp_path: Path) -> None:
    base, cand = tmp_path / "b.json", tmp_path / "c.json"
    for path, dur in ((base, 100), (cand, 200)):
        ev = []
        for k, name in enumerate(HOSTILE):
            ev.append(
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": name,
                    "pid": 0,
                    "tid": 7,
                    "ts": 1000 + k * 1000,
                    "dur": dur,
                    "args": {"device": 0, "stream": 7},
                }
            )
            ev.append(
                {
                    "ph": "X",
                    "cat": "cpu_op",
                    "name": name,
                    "pid": 1,
                    "tid": 1,
                    "ts": 1000 + k * 1000,
                    "dur": dur,
                }
            )
        path.write_text(json.dumps({"traceEvents": ev}))
    d = diff_runs([base], [cand])
    assert {k.name for k in d.kernels} == set(HOSTILE)
    md = render(d, "md")
    assert not re.search(r"(?<!\\)<(script|img)", md) and "![" not in md
    assert "\\[click\\](http" in md and not _bare(md, "[]`")
    assert "\\<script\\>" in md  # (tracekit.present.md_cell: the report's escaper too)
    lines = md.splitlines()
    at = lines.index("## Kernels compared per call")
    head = lines[at + 2]
    rows = [ln for ln in lines[at + 4 : at + 4 + len(HOSTILE)]]
    assert rows and all(len(_split_unescaped(r)) == len(_split_unescaped(head)) for r in rows)
    page = render(d, "html")
    p = _Tags()
    p.feed(page)
    assert "img" not in p.tags and p.tags.count("script") == 1  # only the page's own script
    assert "<script>alert" not in page
    assert any("<script>alert(1)</script>" in t for t in p.text)  # shown as text
    data = json.loads(render(d, "json"))
    assert {k["name"] for k in data["kernels"]} == set(HOSTILE)
    table = render(d, "table")
    assert "\r" not in table and "line1\\x0aline2" in table


def test_md_table_rows_intact_for_hostile_names() -> None:
    row = "| " + " | ".join(md_cell(x) for x in HOSTILE) + " |"
    # Unescaped pipes are the cell separators only.
    cells = [c for c in _split_unescaped(row)]
    assert len(cells) == len(HOSTILE) + 2


def _bare(text: str, chars: str) -> bool:
    """Whether any of `chars` occurs without a backslash escape."""
    esc = False
    for ch in text:
        if ch in chars and not esc:
            return True
        esc = ch == "\\" and not esc
    return False


def _split_unescaped(row: str) -> list[str]:
    out, cur, esc = [], "", False
    for ch in row:
        if ch == "|" and not esc:
            out.append(cur)
            cur = ""
        else:
            cur += ch
        esc = ch == "\\" and not esc
    out.append(cur)
    return out


def test_short_names_keep_full_name_on_hover(tmp_path: Path) -> None:
    long = "void at::native::elementwise_kernel<(int)128, (int)4, " + "x" * 200 + ">(int, T1)"
    base = kineto(tmp_path / "b.json", 2, 2, 100, long)
    cand = kineto(tmp_path / "c.json", 2, 2, 100, long)
    page = render(diff_runs([base], [cand]), "html")
    assert f'title="{html.escape(long)}"' in page
    assert ">elementwise_kernel&lt;128, 4, xxx" in page


@pytest.mark.nsys
def test_check_on_a_16_request_capture_counts_16(tmp_path: Path) -> None:
    """A real `tracekit capture` (nsys + torch.profiler) of 16 requests: check counts 16."""
    from tests.test_capture import HAVE_NSYS, INFER, run_capture

    if not HAVE_NSYS:
        pytest.skip("nsys not on PATH")
    run_dir = tmp_path / "demo"
    res = run_capture(["-o", str(run_dir), "--", sys.executable, str(INFER), "--requests", "16"])
    assert res.returncode == 0, res.stderr[-2000:]
    with tracekit.open(run_dir) as t:  # both tools saw the same 16 requests
        per_trace = t.con.execute(
            "SELECT trace_id, count(*) FROM requests GROUP BY 1 ORDER BY 1"
        ).fetchall()
    assert [n for _, n in per_trace] == [16, 16]
    r = CliRunner().invoke(main, ["check", str(run_dir), "--budget", "end_to_end.count>=16",
                                  "--budget", "end_to_end.count<=16"])  # fmt: skip
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith("PASS end_to_end.count>=16: measured 16 (limit 16)\n")
    d = diff_runs([run_dir], [run_dir])
    assert d.baseline.requests == 16 and not d.headline.entries


def test_folders_of_paired_runs_n_vs_n(tmp_path: Path, sample: Path) -> None:
    """Two runs a side, each a capture seen by two tools: 12 requests a run, a spread known."""
    for side in ("base", "cand"):
        for k in range(2):
            shutil.copytree(sample, tmp_path / side / f"run{k}")
    d = diff_runs([tmp_path / "base"], [tmp_path / "cand"])
    assert len(d.baseline.runs) == 2 and d.baseline.requests == d.candidate.requests == 24
    assert len(d.baseline.views) == 2 and all("counted once" in v for v in d.baseline.views)
    p50 = next(s for s in d.stages if s.stage == "end_to_end").metric("p50_ms")
    assert p50.noise is not None and p50.noise.spread == 0 and p50.delta == 0
    assert d.kernels_unit.name == "request" and d.ops_unit == Unit("request", 12, 12)
    assert all(i.status == "same" and i.spread_ms == 0 for i in d.ops if i.before_count > 1)
