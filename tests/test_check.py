"""tracekit check: budgets hold (exit 0) or fail (exit 1), malformed ones exit 2, JUnit."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.test_diff import make_trace
from tracekit.cli import main
from tracekit.compare.budgets import parse_budget, parse_budget_file
from tracekit.errors import ConfigError


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("check")
    # 32x32 vs 320x320 matmuls: 1000x the work, so the candidate is slower whatever the load.
    return make_trace(d / "base.json", 32), make_trace(d / "cand.json", 320)


def run(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, ["check", *args])
    return r.exit_code, r.stdout, r.stderr


def test_budget_that_holds_exits_0(pair: tuple[Path, Path]) -> None:
    code, out, _ = run(
        str(pair[1]),
        "--budget",
        "inference.p99_ms<=100000",
        "--budget",
        "unattributed.share<=0.9",
        "--budget",
        "end_to_end.count>=8",
    )
    assert code == 0
    lines = out.splitlines()
    assert len(lines) == 3 and all(line.startswith("PASS ") for line in lines)
    assert lines[0].startswith("PASS inference.p99_ms<=100000: measured ")
    assert lines[0].endswith("(limit 100000)")


def test_budget_that_fails_exits_1_and_names_both_figures(pair: tuple[Path, Path]) -> None:
    code, out, err = run(
        str(pair[1]), "--budget", "inference.p50_ms<=0.000001", "--budget", "inference.count>=1"
    )
    assert code == 1
    fail = out.splitlines()[0]
    assert fail.startswith("FAIL inference.p50_ms<=0.000001: measured ")
    assert fail.endswith("(limit 1e-06)")
    assert out.splitlines()[1].startswith("PASS inference.count>=1")
    assert err == "Error: 1 of 2 budgets failed\n"


def test_regression_and_top_kernels_against_baseline(pair: tuple[Path, Path]) -> None:
    base, cand = pair
    code, out, _ = run(
        str(cand), "--baseline", str(base), "--max-regression", "inference.p50_ms=10%"
    )
    assert code == 1 and out.startswith("FAIL inference.p50_ms=10%: measured ")
    assert ", baseline " in out
    code, out, _ = run(
        str(base),
        "--baseline",
        str(base),
        "--max-regression",
        "inference.p50_ms=0%",
        "--no-new-top-kernels",
        "10",
    )
    assert code == 0, out
    code, _, err = run(str(cand), "--max-regression", "inference.p50_ms=10%")
    assert code == 2 and "--baseline" in err


def test_malformed_budgets_exit_2_naming_file_and_line(
    pair: tuple[Path, Path], tmp_path: Path
) -> None:
    f = tmp_path / "budgets.txt"
    f.write_text("# latency budgets\ninference.p99_ms<=50  # the SLO\n\ninference.p99<=3\n")
    code, out, err = run(str(pair[1]), "--budget-file", str(f))
    assert code == 2 and out == ""
    assert err.startswith(f"Error: {f}:4: budget 'inference.p99<=3': unknown metric 'p99'")
    f.write_text("inference.p99_ms <= fifty\n")
    code, _, err = run(str(pair[1]), "--budget-file", str(f))
    assert code == 2 and f"{f}:1:" in err and "not a number" in err
    code, _, err = run(str(pair[1]), "--budget", "inference.p99_ms=<50")
    assert code == 2 and "malformed budget 'inference.p99_ms=<50'" in err
    code, _, err = run(str(pair[1]), "--budget", "decode.p99_ms<=5")
    assert code == 2 and "no stage 'decode'" in err


def test_budget_files_text_and_toml(tmp_path: Path) -> None:
    txt = tmp_path / "b.txt"
    txt.write_text("# c\ninference.p99_ms<=50\n unattributed.share < 0.05 # x\n")
    assert [b.text for b in parse_budget_file(txt)] == [
        "inference.p99_ms<=50",
        "unattributed.share < 0.05",
    ]
    toml = tmp_path / "b.toml"
    toml.write_text('[budgets]\n"inference.p99_ms" = "<=50"\n"end_to_end.p50_ms" = "<20"\n')
    got = [(b.stage, b.metric, b.op, b.limit) for b in parse_budget_file(toml)]
    assert got == [("inference", "p99_ms", "<=", 50.0), ("end_to_end", "p50_ms", "<", 20.0)]
    toml.write_text('[budgets]\n"inference.p99_ms" = 50\n')
    with pytest.raises(ConfigError, match=r"b\.toml:2: budget 'inference\.p99_ms' must be"):
        parse_budget_file(toml)
    assert parse_budget("x.max_ms>1.5").op == ">"


def test_junit_has_one_testcase_per_budget(pair: tuple[Path, Path], tmp_path: Path) -> None:
    junit = tmp_path / "out" / "check.xml"
    code, _, err = run(
        str(pair[1]),
        "--budget",
        "inference.p99_ms<=100000",
        "--budget",
        "end_to_end.p50_ms<=0",
        "--junit",
        str(junit),
    )
    assert code == 1 and f"Wrote {junit}" in err
    root = ET.parse(junit).getroot()
    cases = root.findall("testcase")
    assert [c.get("name") for c in cases] == ["inference.p99_ms<=100000", "end_to_end.p50_ms<=0"]
    assert root.get("tests") == "2" and root.get("failures") == "1"
    assert cases[0].find("failure") is None and cases[1].find("failure") is not None
    assert not list(junit.parent.glob("*.tmp"))
