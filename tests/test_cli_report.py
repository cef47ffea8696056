"""`tracekit report` through click: default names, --force, -o, formats, run dirs."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from tests.synth_kineto import generate
from tracekit.cli import main


def test_default_output_and_no_overwrite(tmp_path: Path) -> None:
    trace = generate(tmp_path / "trace.json.gz", requests=3, layers=1)
    runner = CliRunner()
    r = runner.invoke(main, ["report", str(trace)])
    out = tmp_path / "trace.report.html"
    assert r.exit_code == 0 and r.output == f"Wrote {out}\n"
    before = out.read_bytes()
    r = runner.invoke(main, ["report", str(trace)])
    assert r.exit_code == 2
    assert r.output == (
        f"Error: {out}: already exists; pass --force to overwrite it or -o to write elsewhere\n"
    )
    assert out.read_bytes() == before
    r = runner.invoke(main, ["report", str(trace), "--force"])
    assert r.exit_code == 0
    assert not list(tmp_path.glob(".*.tmp"))


def test_formats_and_output(tmp_path: Path) -> None:
    trace = generate(tmp_path / "t.json.gz", requests=3, layers=1)
    r = CliRunner().invoke(
        main, ["report", str(trace), "--format", "json", "-o", str(tmp_path / "x" / "r.json")]
    )
    assert r.exit_code == 0, r.output
    data = json.loads((tmp_path / "x" / "r.json").read_text())
    assert data["schema_version"] == 1 and data["traces"][0]["requests"]["count"] == 3
    r = CliRunner().invoke(main, ["report", str(trace), "--format", "md"])
    assert r.exit_code == 0 and (tmp_path / "t.report.md").read_text().startswith("# tracekit")


def test_run_dir_with_capture_json_never_shows_env(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    generate(run / "a.json.gz", requests=2, layers=1)
    generate(run / "b.json.gz", requests=3, layers=1, seed=3)
    (run / "capture.json").write_text(
        json.dumps(
            {
                "command": ["python", "infer.py"],
                "versions": {"torch": "2.13"},
                "env": {"HF_TOKEN": "hf_secret"},
                "options": {"env": {"KEY": "secret2"}, "nsys": False},
            }
        )
    )
    r = CliRunner().invoke(main, ["report", str(run)])
    assert r.exit_code == 0, r.output
    html = (run / "report.html").read_text()
    assert "secret" not in html and "python infer.py" in html
    assert 'id="trace-1"' in html and 'id="trace-2"' in html
    # Naming the manifest itself reports the same run.
    out = tmp_path / "via-manifest.json"
    args = ["report", str(run / "capture.json"), "--format", "json", "-o", str(out)]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    assert len(json.loads(out.read_text())["traces"]) == 2


def test_bad_inputs(tmp_path: Path) -> None:
    r = CliRunner().invoke(main, ["report", str(tmp_path / "missing.json")])
    assert r.exit_code == 2 and r.output.startswith("Error: ") and "missing.json" in r.output
    trace = generate(tmp_path / "t.json.gz", requests=2, layers=1)
    r = CliRunner().invoke(main, ["report", str(trace), str(trace)])
    assert r.exit_code == 2 and "name the output with -o" in r.output
