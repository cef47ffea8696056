"""Screenshots of the report's first screen (1400 x 900 px, headless Chromium) for docs/report.md.

    python tools/screenshots.py [--traces ../shared/traces] [--out docs/img]

Three reports: the bundled sample (sample_traces/, a tracekit capture of examples/infer.py), a
2-GPU nsys export and a Kineto inference trace recorded by others. Reports are written to a
temporary folder; only the PNGs land in --out.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SHOTS = {
    "report-sample.png": "sample_traces",
    "report-nsys-2gpu.png": "nsys_2026_h100x2_mfu_before.sqlite",
    "report-kineto-bert.png": "kineto_h100_bert_small_inference_tracelens.json.gz",
}
# one section (its heading's id) at the top: the roofline of a Kineto trace with shapes
SECTION_SHOTS = {
    "report-roofline-qwen.png": ("kineto_h100_qwen1.5_0.5b_inference_tracelens.json.gz",
                                 "t1-roofline-h"),
    # the timeline (issue 38): a CPU-only capture, an image pipeline whose GPU idles between
    # bursts, a diffusion pipeline on one GPU
    "timeline-sample.png": ("sample_traces", "t1-timeline"),
    "timeline-vit.png": ("kineto_h100_vit_nsfw_imgcls_profile_memory_tracelens.json.gz",
                         "t1-timeline"),
    "timeline-flux.png": (
        "kineto_mi300x_flux.1_xdit_diffusers_pipeline_with_stack_tracelens.json.gz", "t1-timeline"
    ),
    # the memory chart and the cross-rank section
    "memory-vit.png": ("kineto_h100_vit_nsfw_imgcls_profile_memory_tracelens.json.gz",
                       "t1-memory-h"),
    "ranks-torchrec.png": ("kineto_ampere_torchrec_2of128ranks_sampled_hta", "ranks-section"),
}  # fmt: skip
WIDTH, HEIGHT = 1400, 900


def from_section(html: Path, heading_id: str) -> Path:
    """A copy of the report that starts at one section's heading (headless Chromium shoots the
    top of a page, and the report's CSP allows no injected script to scroll it)."""
    text = html.read_text()
    body = text.index("<body>") + len("<body>")
    at = text.rindex("<", 0, text.index(f' id="{heading_id}"'))  # the element's start tag
    cut = text[:body] + text[at:]
    out = html.with_name(f"{html.stem}-{heading_id}.html")
    out.write_text(cut)
    return out


def shoot(html: Path, png: Path, profile: Path, section: str = "") -> None:
    page = from_section(html, section) if section else html
    cmd = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
           "--no-first-run", f"--user-data-dir={profile}", f"--window-size={WIDTH},{HEIGHT}",
           f"--screenshot={png}", page.as_uri()]  # fmt: skip
    subprocess.run(cmd, check=True, capture_output=True, timeout=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", type=Path, default=REPO.parent / "shared" / "traces")
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "img")
    args = ap.parse_args()
    if shutil.which("chromium") is None:
        sys.exit("chromium is not installed")
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        shots = {png: (name, "") for png, name in SHOTS.items()} | SECTION_SHOTS
        for png, (name, section) in shots.items():
            src = REPO / name if name == "sample_traces" else args.traces / name
            html = Path(tmp) / f"{png}.html"
            subprocess.run([sys.executable, "-m", "tracekit", "report", str(src), "-o", str(html)],
                           check=True, capture_output=True)  # fmt: skip
            shoot(html, args.out / png, Path(tmp) / "profile", section)
            print(f"wrote {args.out / png}")


if __name__ == "__main__":
    main()
