"""A page that fits (issue 38 item 2): op-name variants grouped. The page as Chromium lays it
out at 1400 px (at most 7,000 px tall, no table of at most 10 columns scrolling sideways, long
tables folded behind "show all") is tests/test_report_browser.py's test_page_fits_at_1400_px,
which reads the dumps the other browser tests take of the same pages."""

from __future__ import annotations

import pytest
from conftest import SHARED_TRACES

import tracekit

EMIT_NVTX = SHARED_TRACES / "nsys_2026_h100x2_torch_emit_nvtx_window.sqlite"


@pytest.mark.skipif(not EMIT_NVTX.exists(), reason=f"{EMIT_NVTX} is absent")
def test_emit_nvtx_op_variants_are_one_row() -> None:
    """'aten::to, op_id = N' ranges (1,187 names) are one op 'aten::to', with the
    calls of every variant (counted here with sqlite3 over the export)."""
    import sqlite3

    con = sqlite3.connect(f"{EMIT_NVTX.as_uri()}?mode=ro&immutable=1", uri=True)
    calls = con.execute(
        "SELECT count(*), count(DISTINCT coalesce(n.text, s.value)) FROM NVTX_EVENTS n "
        "LEFT JOIN StringIds s ON s.id = n.textId WHERE n.eventType = 59 "
        "AND (coalesce(n.text, s.value) = 'aten::to' "
        "OR coalesce(n.text, s.value) LIKE 'aten::to, %')"
    ).fetchone()
    con.close()
    assert calls[1] > 1000  # one name per call before grouping
    with tracekit.open(EMIT_NVTX) as ts:
        rows = ts.query_dicts("top_ops", trace_id=1, limit=10_000)
    to_rows = [r for r in rows if r["name"] == "aten::to" and r["via"] is None]
    assert not [r for r in rows if r["name"].startswith("aten::to, ")]
    assert sum(r["calls"] for r in to_rows) == calls[0]
