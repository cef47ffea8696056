"""The HTML report as a user sees it: headless Chromium opens the report of sample_traces/ and of
every shared trace at 1400 and 800 px wide, and the report's own `#selfcheck` mode writes what
the browser laid out (widths, line boxes, chart values, link targets, ids, text contrast, the
text in the top 900 px) to one attribute of the DOM dump. The assertions and the expected first
screen are here; the figures the first screen must state come from a plain sqlite3/json pass
(tests/nsys_oracle.py, tests/kineto_oracle.py are the per-format oracles; here only presence and
form are checked, the values elsewhere)."""

from __future__ import annotations

import html
import json
import re
import shutil
from pathlib import Path

import pytest

from tests import procs
from tests.conftest import SAMPLE_TRACES, shared_params
from tests.gpu_oracle import raw_gpu_intervals
from tracekit.report import write_report

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium is not installed"),
]
WIDTHS = (1400, 800)
FIRST_SCREEN_PX = 900
TRACES = [pytest.param(SAMPLE_TRACES, id="sample_traces"), *shared_params("*.sqlite"),
          *shared_params("*.json.gz")]  # fmt: skip
_reports: dict[Path, Path] = {}
_checks: dict[tuple[Path, int], tuple[dict, str]] = {}


def gpu_devices(trace: Path) -> int:
    """Devices with kernels, copies or memsets, per trace file (a run folder: each file)."""
    files = sorted(trace.iterdir()) if trace.is_dir() else [trace]
    traces = [f for f in files if f.name.endswith((".sqlite", ".trace.json", ".json.gz"))]
    return sum(len(raw_gpu_intervals(f)) for f in traces)


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("browser")


def report_of(trace: Path, out_dir: Path) -> Path:
    if trace not in _reports:
        _reports[trace] = write_report([trace], output=out_dir / f"{trace.name}.html")
    return _reports[trace]


def selfcheck(page: Path, width: int, profile: Path) -> tuple[dict, str]:
    cmd = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--no-first-run", f"--user-data-dir={profile}",
           f"--window-size={width},{FIRST_SCREEN_PX}", "--enable-logging=stderr", "--v=0",
           "--dump-dom", f"{page.as_uri()}#selfcheck"]  # fmt: skip
    proc = procs.run(cmd, capture_output=True, text=True)
    m = re.search(r'data-selfcheck="([^"]*)"', proc.stdout)
    assert m, proc.stderr[-2000:]
    return json.loads(html.unescape(m.group(1))), proc.stderr


def selfcheck_of(page: Path, width: int, profile: Path) -> tuple[dict, str]:
    """selfcheck, once per page and width: the layout and first-screen tests read the same
    dump of the same page (a file stays on one worker)."""
    if (page, width) not in _checks:
        _checks[page, width] = selfcheck(page, width, profile)
    return _checks[page, width]


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("trace", TRACES)
def test_report_layout_in_chromium(trace: Path, width: int, report_dir: Path,
                                   tmp_path: Path) -> None:  # fmt: skip
    page = report_of(trace, report_dir)
    check, log = selfcheck_of(page, width, tmp_path / "profile")
    assert not re.search(r"CONSOLE.*(Uncaught|Refused|Error)", log), log[-2000:]
    assert check["external"] == 0  # no network request: nothing points outside the file
    assert check["page_width"] <= check["viewport"], check["wide"][:10]
    assert check["wide"] == [], check["wide"][:10]
    assert check["wrapped"] == [], check["wrapped"][:10]
    assert all(values >= 3 for _, values in check["charts"]), check["charts"]
    assert check["broken_links"] == []
    assert check["finding_links"] == check["findings"]  # every finding links to its evidence
    assert check["duplicate_ids"] == []
    assert check["min_contrast"] >= 4.5, check["low_contrast"][:10]


@pytest.mark.parametrize("trace", TRACES)
def test_first_screen_answers(trace: Path, report_dir: Path, tmp_path: Path) -> None:
    """Top 900 px at 1400 px: end-to-end or window time, GPU busy % of each device (or that
    there is no GPU activity), and the top kernel or op with its share."""
    page = report_of(trace, report_dir)
    check, _ = selfcheck_of(page, 1400, tmp_path / "profile")
    text = check["first_screen"]
    assert re.search(r"(end-to-end|p50|window|request)[^.]*?\d+\.\d+ ms", text, re.I), text
    devices = gpu_devices(trace)
    if devices:
        assert len(re.findall(r"busy \d+%", text)) >= devices, text
    else:
        assert "No GPU activity" in text, text
    assert re.search(r"(top kernel|top op|Top activity|top host op)[^.]*\d", text, re.I), text
