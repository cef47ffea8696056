"""A BERT text-classification service built on Hugging Face transformers, with no tracekit in it.

What a new user brings to tracekit: a service loop of its own, timed by its own clock.

- model: `BertForSequenceClassification` from a `BertConfig` (4 layers, eager attention, random
  weights from a fixed seed); nothing is downloaded (HF_HUB_OFFLINE is set).
- tokenizer: a WordPiece `BertTokenizerFast` over a vocabulary generated at start-up and written
  to a temporary file.
- requests: each one a batch of support tickets (`--batch` texts) of 17-631 tokens, heavy-tailed;
  `handle(texts)` serves one: `preprocess` (`clean` + `tokenize` + tensors), `infer` (the model),
  `postprocess` (softmax, top-k, JSON). The first `--warmup` requests are warm-up, served the
  same way (a real service warms up through its own request path).
- `--padding max` serves the texts in arrival order, each batch padded to the model's maximum
  length (640). `--padding bucket` is the fix of the seed scenario: a length-bucketing batcher
  sorts the same texts by length, batches neighbours, and pads each batch to the next length
  bucket of its longest text; the batches are then served in a shuffled order, so warm-up and
  measured requests are not sorted by size.

The service prints its own per-request clock (p50/p99 of the measured requests per step) and,
with `--self-times FILE`, appends one JSON line with every request's times (ms), marked
`warmup`, plus its token counts, so tests can compare a trace with the program's own clock.

    python examples/hf_service.py --requests 12 --warmup 2 --padding max
    tracekit capture --request hf_service:handle --warmup 2 \\
        --stage preprocess=hf_service:preprocess --stage inference=hf_service:infer \\
        --stage postprocess=hf_service:postprocess -- python examples/hf_service.py
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import re
import sys
import tempfile
import time
import unicodedata
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402
from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast  # noqa: E402

LABELS = ("billing", "shipping", "technical", "account", "feedback", "cancellation")
MAX_LEN = 640
BUCKETS = (32, 48, 64, 96, 128, 192, 256, 384, 512, MAX_LEN)
MIN_TOKENS, MAX_TOKENS = 17, 631
STEPS = ("handle", "preprocess", "clean", "tokenize", "infer", "postprocess")

F = TypeVar("F", bound=Callable[..., Any])

_TOPIC_WORDS = {
    "billing": "invoice charge refund payment card billed twice price discount receipt tax",
    "shipping": "package delivery courier tracking arrived late address warehouse parcel box",
    "technical": "error crash login app screen update bug firmware timeout sync battery",
    "account": "password email profile username settings verification security locked",
    "feedback": "great love helpful slow friendly support team experience suggestion",
    "cancellation": "cancel subscription plan renewal terminate contract close stop",
}
_FILLER = (
    "hello i am writing because my order from last week has a problem and i would like some "
    "help please let me know what you need from me thanks in advance for your time the "
    "service was fine until now but today something went wrong again"
).split()
_NOISE = ("<p>", "</p>", "<br/>", "&nbsp;", "Café", "ＦＵＬＬ", "\u200b", "🙂", "—")

# The service's own clock: (step, ms) appended by @timed, read per request by serve().
_CLOCK: list[tuple[str, float]] = []


def timed(fn: F) -> F:
    """The service's own stopwatch around a step (no tracekit)."""
    name = fn.__name__

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter_ns()
        try:
            return fn(*args, **kwargs)
        finally:
            _CLOCK.append((name, (time.perf_counter_ns() - t0) / 1e6))

    return wrapper  # type: ignore[return-value]


def vocabulary() -> list[str]:
    """Special tokens, every word the generator uses, and WordPiece pieces for the rest."""
    words = sorted({w for ws in _TOPIC_WORDS.values() for w in ws.split()} | set(_FILLER))
    pieces = [f"##{c}" for c in "abcdefghijklmnopqrstuvwxyz0123456789"]
    letters = list("abcdefghijklmnopqrstuvwxyz0123456789.,!?")
    return ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *letters, *pieces, "cafe", "full",
            *words]  # fmt: skip


def make_tokenizer(folder: Path) -> BertTokenizerFast:
    vocab = folder / "vocab.txt"
    vocab.write_text("\n".join(vocabulary()) + "\n", encoding="utf-8")
    return BertTokenizerFast(vocab_file=str(vocab), do_lower_case=True)


def make_model(vocab_size: int, seed: int) -> BertForSequenceClassification:
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=vocab_size,
        hidden_size=64,
        num_hidden_layers=4,
        num_attention_heads=4,
        intermediate_size=256,
        max_position_embeddings=MAX_LEN,
        num_labels=len(LABELS),
        attn_implementation="eager",
    )
    return BertForSequenceClassification(config).eval()


def make_text(rng: random.Random, tokens: int) -> str:
    """A ticket of `tokens` WordPiece tokens once cleaned (CLS and SEP included), with noise."""
    topic = rng.choice(LABELS)
    words: list[str] = []
    for _ in range(tokens - 2):
        words.append(rng.choice(_TOPIC_WORDS[topic].split() if rng.random() < 0.3 else _FILLER))
        if rng.random() < 0.1:
            words.append(rng.choice(_NOISE[:4] + _NOISE[6:8]))  # removed by clean()
    return " ".join(words)


def request_lengths(rng: random.Random, batch: int) -> list[int]:
    """Token counts of one request's texts: heavy-tailed between 17 and 631."""
    return [min(MAX_TOKENS, MIN_TOKENS + int(rng.paretovariate(1.2) * 20) - 20)
            for _ in range(batch)]  # fmt: skip


_TAG = re.compile(r"<[^>]{0,200}>|&[a-z]{2,8};")
_SPACE = re.compile(r"\s+")


@timed
def clean(texts: list[str]) -> list[str]:
    """Unicode normalisation, HTML removal, control/format/symbol characters dropped."""
    out = []
    for text in texts:
        text = _TAG.sub(" ", unicodedata.normalize("NFKC", text)).lower()
        kept = [ch for ch in text if ch.isspace() or unicodedata.category(ch)[0] not in "CS"]
        out.append(_SPACE.sub(" ", "".join(kept)).strip())
    return out


@timed
def tokenize(tok: BertTokenizerFast, texts: list[str], padding: str) -> dict[str, torch.Tensor]:
    if padding == "max":
        return dict(tok(texts, padding="max_length", max_length=MAX_LEN, truncation=True,
                        return_tensors="pt"))  # fmt: skip
    longest = max(len(ids) for ids in tok(texts, truncation=True, max_length=MAX_LEN)["input_ids"])
    length = next(b for b in BUCKETS if b >= longest)
    return dict(tok(texts, padding="max_length", max_length=length, truncation=True,
                    return_tensors="pt"))  # fmt: skip


@timed
def preprocess(tok: BertTokenizerFast, texts: list[str], padding: str) -> dict[str, torch.Tensor]:
    return tokenize(tok, clean(texts), padding)


@timed
def infer(model: BertForSequenceClassification, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    with torch.inference_mode():
        return model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits


@timed
def postprocess(logits: torch.Tensor) -> str:
    probs = torch.softmax(logits.float(), dim=-1)
    top_p, top_i = probs.topk(3, dim=-1)
    results = []
    for ps, idx in zip(top_p, top_i, strict=True):
        top = [{"label": LABELS[int(j)], "p": round(float(p), 4)}
               for p, j in zip(ps, idx, strict=True)]  # fmt: skip
        results.append({"label": LABELS[int(idx[0])], "top": top})
    return json.dumps({"results": results}, sort_keys=True)


class Service:
    def __init__(self, padding: str, seed: int, folder: Path) -> None:
        self.padding = padding
        self.tok = make_tokenizer(folder)
        self.model = make_model(len(self.tok.get_vocab()), seed)
        self.last: dict[str, int] = {}


SERVICE: Service | None = None


@timed
def handle(texts: list[str]) -> str:
    """One request: preprocess, inference, postprocess."""
    svc = SERVICE
    assert svc is not None
    batch = preprocess(svc.tok, texts, svc.padding)
    logits = infer(svc.model, batch)
    mask = batch["attention_mask"]
    svc.last = {"texts": len(texts), "padded_len": int(mask.shape[1]),
                "tokens": int(mask.sum()), "padded_tokens": int(mask.numel())}  # fmt: skip
    return postprocess(logits)


def pct(values: list[float], q: float) -> float:
    """Nearest-rank-free linear percentile (numpy's default), as tracekit computes them."""
    s = sorted(values)
    if not s:
        return float("nan")
    pos = (len(s) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def arrivals(rng: random.Random, requests: int, batch: int) -> list[list[str]]:
    """The texts as they arrive, `batch` to a request (the same for both padding modes)."""
    return [[make_text(rng, n) for n in request_lengths(rng, batch)] for _ in range(requests)]


def bucketed(requests: list[list[str]], batch: int, seed: int) -> list[list[str]]:
    """A length-bucketing batcher: the same texts sorted by length, neighbours batched together,
    the batches served in a shuffled (not size-sorted) order."""
    texts = sorted((t for r in requests for t in r), key=lambda t: (len(t.split()), t))
    batches = [texts[i : i + batch] for i in range(0, len(texts), batch)]
    random.Random(seed + 1).shuffle(batches)
    return batches


def serve(args: argparse.Namespace) -> list[dict[str, Any]]:
    global SERVICE
    torch.set_num_threads(args.threads)
    requests = arrivals(random.Random(args.seed), args.warmup + args.requests, args.batch)
    if args.padding == "bucket":
        requests = bucketed(requests, args.batch, args.seed)
    with tempfile.TemporaryDirectory(prefix="hf_service-") as folder:
        SERVICE = Service(args.padding, args.seed, Path(folder))
        records = []
        for r, texts in enumerate(requests):
            _CLOCK.clear()
            handle(texts)
            ms: dict[str, float] = {}
            for step, t in _CLOCK:
                ms[step] = round(ms.get(step, 0.0) + t, 4)
            records.append({"request": r, "warmup": r < args.warmup, "ms": ms, **SERVICE.last})
    return records


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--requests", type=int, default=12, help="measured requests")
    ap.add_argument("--warmup", type=int, default=2, help="warm-up requests served first")
    ap.add_argument("--batch", type=int, default=2, help="texts per request")
    ap.add_argument("--padding", choices=("max", "bucket"), default="max")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    ap.add_argument("--self-times", type=Path, metavar="FILE",
                    help="append this run's own per-request clock to FILE (JSON line)")  # fmt: skip
    args = ap.parse_args(argv)
    records = serve(args)
    measured = [r for r in records if not r["warmup"]]
    real = sum(r["tokens"] for r in measured)
    padded = sum(r["padded_tokens"] for r in measured)
    waste = 100 * (1 - real / max(padded, 1))
    print(f"{len(measured)} requests (+{args.warmup} warm-up), padding={args.padding}, "
          f"batch={args.batch}; padding is {waste:.1f}% of tokens")  # fmt: skip
    print(f"  {'step':<12} {'p50 ms':>9} {'p99 ms':>9}")
    for step in STEPS:
        vals = [r["ms"][step] for r in measured if step in r["ms"]]
        if vals:
            print(f"  {step:<12} {pct(vals, 0.5):9.3f} {pct(vals, 0.99):9.3f}")
    if args.self_times is not None:
        with open(args.self_times, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"padding": args.padding, "requests": records},
                                sort_keys=True) + "\n")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
