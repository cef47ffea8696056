"""A Hugging Face `pipeline` service (text classification), with no tracekit in it.

- model: `BertForSequenceClassification` from a `BertConfig` (4 layers, random weights from a
  fixed seed); nothing is downloaded (HF_HUB_OFFLINE is set).
- tokenizer: a WordPiece `BertTokenizerFast` over a vocabulary written at start-up.
- requests: each one a call of the pipeline on `--batch` support tickets of 40-480 words, padded
  to the longest; the pipeline runs its own preprocess (the tokenizer), forward (the model,
  and the copies to and from its device) and postprocess (softmax, top-k labels).

The service keeps its own clock: a subclass of the pipeline times each of its steps and each
call, and it prints p50s; with `--self-times FILE` it writes one JSON line with every request's
times (ms).

    python examples/pipeline_service.py --requests 8 --warmup 2
    tracekit capture -- python examples/pipeline_service.py --requests 8 --warmup 2
    python examples/pipeline_service.py --torch-profile pipe.json   # plain torch.profiler
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402
from transformers import (  # noqa: E402
    BertConfig,
    BertForSequenceClassification,
    BertTokenizerFast,
    TextClassificationPipeline,
)

LABELS = ("billing", "shipping", "technical", "account", "feedback", "cancellation")
WORDS = (
    "invoice charge refund payment card package delivery courier tracking error crash login "
    "password email profile great love helpful slow cancel subscription plan hello order week "
    "problem help please thanks time service today wrong again"
).split()

# The service's own clock: (step, ms) of the current request.
CLOCK: list[tuple[str, float]] = []


@contextmanager
def timed(step: str) -> Iterator[None]:
    t0 = time.perf_counter_ns()
    try:
        yield
    finally:
        CLOCK.append((step, (time.perf_counter_ns() - t0) / 1e6))


class ClockedPipeline(TextClassificationPipeline):
    """The stock pipeline, each step timed by the service's own clock."""

    def preprocess(self, inputs: Any, **kwargs: Any) -> Any:
        with timed("preprocess"):
            return super().preprocess(inputs, **kwargs)

    def forward(self, model_inputs: Any, **kwargs: Any) -> Any:
        with timed("inference"):
            return super().forward(model_inputs, **kwargs)

    def postprocess(self, model_outputs: Any, **kwargs: Any) -> Any:
        with timed("postprocess"):
            return super().postprocess(model_outputs, **kwargs)


def make_pipeline(seed: int, folder: Path) -> ClockedPipeline:
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    tok = BertTokenizerFast(vocab_file=str(folder / "vocab.txt"), do_lower_case=True)
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=len(vocab), hidden_size=128, num_hidden_layers=4,
                        num_attention_heads=4, intermediate_size=512,
                        max_position_embeddings=512, num_labels=len(LABELS))  # fmt: skip
    config.id2label = dict(enumerate(LABELS))
    model = BertForSequenceClassification(config).eval()
    return ClockedPipeline(model=model, tokenizer=tok, top_k=3)


def serve(pipe: ClockedPipeline, texts: list[str]) -> dict[str, float]:
    CLOCK.clear()
    t0 = time.perf_counter_ns()
    pipe(texts, batch_size=len(texts), truncation=True, padding=True)
    row = {"request": (time.perf_counter_ns() - t0) / 1e6}
    for step, ms in CLOCK:
        row[step] = row.get(step, 0.0) + ms
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--self-times", type=Path, help="append one JSON line of per-request ms")
    ap.add_argument("--torch-profile", type=Path, help="record a plain torch.profiler trace here")
    args = ap.parse_args()
    torch.set_num_threads(1)
    rng = random.Random(args.seed)

    def ticket() -> str:
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(40, 480)))

    batches = [[ticket() for _ in range(args.batch)] for _ in range(args.warmup + args.requests)]
    with tempfile.TemporaryDirectory() as folder:
        pipe = make_pipeline(args.seed, Path(folder))
        rows = [dict(serve(pipe, b), warmup=True) for b in batches[: args.warmup]]
        if args.torch_profile:
            from torch.profiler import ProfilerActivity, profile

            with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
                for b in batches[args.warmup :]:
                    rows.append(dict(serve(pipe, b), warmup=False))
                    prof.step()
            prof.export_chrome_trace(str(args.torch_profile))
        else:
            rows += [dict(serve(pipe, b), warmup=False) for b in batches[args.warmup :]]
    measured = [r for r in rows if not r["warmup"]]
    for key in ("request", "preprocess", "inference", "postprocess"):
        print(f"{key:>12} p50 {statistics.median(r[key] for r in measured):8.3f} ms")
    if args.self_times:
        with args.self_times.open("a") as fh:
            fh.write(json.dumps({"requests": rows}) + "\n")


if __name__ == "__main__":
    main()
