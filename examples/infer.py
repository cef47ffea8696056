"""A small text-classification service loop, annotated with tracekit stages.

Each request is a batch of support-ticket texts of varied length:

- preprocess: text cleaning (unicode normalisation, lowercase, HTML and URL removal, control
  characters), WordPiece tokenization with a `tokenizers` fast tokenizer trained at start-up on
  a generated corpus (nothing is downloaded), padding/truncation, attention masks, tensor
  construction and the host-to-device copy;
- inference: a small BERT-like encoder (embeddings, transformer layers with explicit
  bmm/softmax attention, classifier head; random weights from a fixed seed);
- postprocess: softmax, top-k, label decoding, key-token extraction, JSON formatting.

`--padding max` pads every batch to the model's maximum length; `--padding bucket` pads to the
next length bucket of the batch's longest text: a change that really alters inference time.

The script times each stage itself and prints, at the end, per-stage mean ms; with
`--self-times FILE` it also appends one JSON line with per-request per-stage ms to FILE, so a
test can compare the trace's stage durations with the script's own clock.

    python examples/infer.py --requests 24 --padding bucket
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import sys
import time
import unicodedata
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from tracekit.annotate import request, stage  # also exported as tracekit.stage/request

LABELS = ("billing", "shipping", "technical", "account", "feedback", "cancellation")
MAX_LEN = 128
BUCKETS = (16, 32, 64, 128)
STAGES = ("preprocess", "inference", "postprocess")

_WORDS = {
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
    "service was fine until now but today something went wrong again and again"
).split()
_DECOR = (
    "<p>", "</p>", "<br/>", "<b>", "</b>", "&nbsp;", "Café", "naïve", "ﬁle", "ＦＵＬＬ",
    "\u200b", "\t", "🙂", "—",
)  # fmt: skip


def make_text(rng: random.Random) -> str:
    """A support ticket with HTML, URLs and unicode noise; length is heavy-tailed."""
    topic = rng.choice(LABELS)
    n = min(int(rng.paretovariate(1.3) * 6), 160)
    words = []
    for _ in range(n):
        r = rng.random()
        if r < 0.3:
            words.append(rng.choice(_WORDS[topic].split()))
        elif r < 0.9:
            words.append(rng.choice(_FILLER))
        elif r < 0.96:
            words.append(rng.choice(_DECOR))
        else:
            words.append(f"https://support.example.com/t/{rng.randrange(10**6)}?ref=mail")
        if rng.random() < 0.08:
            words[-1] = words[-1].capitalize() + "."
    return " ".join(words)


def train_tokenizer(rng: random.Random) -> Tokenizer:
    """A WordPiece tokenizer trained on a generated corpus (a few hundred ms, offline)."""
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(
        vocab_size=3000,
        special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]"],
        show_progress=False,
    )
    corpus = [clean_text(make_text(rng)) for _ in range(800)]
    tok.train_from_iterator(corpus, trainer=trainer)
    return tok


_TAG = re.compile(r"<[^>]{0,200}>|&[a-z]{2,8};")
_URL = re.compile(r"https?://\S+")
_SPACE = re.compile(r"\s+")


def clean_text(text: str) -> str:
    text = unicodedata.normalize("NFKC", text)
    text = _URL.sub(" ", _TAG.sub(" ", text)).lower()
    # Drop control and format characters (zero-width spaces ...) and symbols (emoji).
    text = "".join(
        ch for ch in text if ch.isspace() or unicodedata.category(ch)[0] not in ("C", "S")
    )
    return _SPACE.sub(" ", text).strip()


class Attention(torch.nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads, self.dk = heads, d // heads
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.out = torch.nn.Linear(d, d)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)

        def heads(z: torch.Tensor) -> torch.Tensor:
            return z.reshape(b, t, self.heads, self.dk).transpose(1, 2).reshape(-1, t, self.dk)

        q, k, v = heads(q), heads(k), heads(v)
        scores = torch.bmm(q, k.transpose(1, 2)) / math.sqrt(self.dk)
        bias = (1.0 - mask[:, None, None, :].float()) * -1e9
        scores = scores.reshape(b, self.heads, t, t) + bias
        probs = torch.softmax(scores, dim=-1).reshape(-1, t, t)
        ctx = torch.bmm(probs, v).reshape(b, self.heads, t, self.dk).transpose(1, 2)
        return self.out(ctx.reshape(b, t, d))


class Layer(torch.nn.Module):
    def __init__(self, d: int, heads: int, ffn: int) -> None:
        super().__init__()
        self.attn = Attention(d, heads)
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.ff = torch.nn.Sequential(
            torch.nn.Linear(d, ffn), torch.nn.GELU(), torch.nn.Linear(ffn, d)
        )

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = self.ln1(x + self.attn(x, mask))
        return self.ln2(x + self.ff(x))


class Encoder(torch.nn.Module):
    """A small BERT-like classifier: embeddings, N layers, [CLS] pooling, linear head."""

    def __init__(self, vocab: int, d: int = 64, heads: int = 4, layers: int = 2) -> None:
        super().__init__()
        self.tok = torch.nn.Embedding(vocab, d)
        self.pos = torch.nn.Embedding(MAX_LEN, d)
        self.ln = torch.nn.LayerNorm(d)
        self.layers = torch.nn.ModuleList(Layer(d, heads, 4 * d) for _ in range(layers))
        self.head = torch.nn.Linear(d, len(LABELS))

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = self.ln(self.tok(ids) + self.pos(pos)[None])
        for layer in self.layers:
            x = layer(x, mask)
        return self.head(x[:, 0]), x


def pad_length(longest: int, padding: str) -> int:
    if padding == "max":
        return MAX_LEN
    return next((b for b in BUCKETS if b >= longest), MAX_LEN)


def preprocess(tok: Tokenizer, texts: list[str], padding: str, device: torch.device) -> dict:
    cleaned = [clean_text(t) for t in texts]
    encs = tok.encode_batch(cleaned)
    cls, sep, pad = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]"), tok.token_to_id("[PAD]")
    seqs = [[cls, *e.ids[: MAX_LEN - 2], sep] for e in encs]
    length = pad_length(max(len(s) for s in seqs), padding)
    ids = torch.full((len(seqs), length), pad, dtype=torch.long)
    mask = torch.zeros((len(seqs), length), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s, dtype=torch.long)
        mask[i, : len(s)] = 1
    real = int(mask.sum())
    return {
        "ids": ids.to(device, non_blocking=True),
        "mask": mask.to(device, non_blocking=True),
        "seq_len": length,
        "lengths": [len(s) for s in seqs],  # each text's real tokens (its mask row's ones)
        "tokens": real,
        "padded_tokens": ids.numel() - real,
    }


def postprocess(tok: Tokenizer, batch: dict, logits: torch.Tensor, hidden: torch.Tensor) -> str:
    probs = torch.softmax(logits.float(), dim=-1).cpu()
    top_p, top_i = probs.topk(3, dim=-1)
    # Key tokens: the positions with the largest hidden-state norm, decoded back to text.
    norms = (hidden.norm(dim=-1) * batch["mask"]).cpu()
    key_pos = norms.topk(min(8, norms.shape[1]), dim=-1).indices
    ids = batch["ids"].cpu()
    results = []
    for i in range(probs.shape[0]):
        keys = [tok.id_to_token(int(ids[i, p])) for p in key_pos[i]]
        results.append(
            {
                "label": LABELS[int(top_i[i, 0])],
                "top": [
                    {"label": LABELS[int(j)], "p": round(float(p), 4)}
                    for p, j in zip(top_p[i], top_i[i], strict=True)
                ],
                "key_tokens": [k for k in keys if k and not k.startswith("[")],
                "text": tok.decode(ids[i].tolist()),
            }
        )
    return json.dumps({"results": results}, ensure_ascii=False, sort_keys=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=24)
    ap.add_argument("--padding", choices=("max", "bucket"), default="max")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--warmup",
        type=int,
        default=2,
        help="unannotated requests run first (first-call costs stay out of stages)",
    )
    ap.add_argument("--max-batch", type=int, default=8)
    ap.add_argument(
        "--self-times",
        type=Path,
        default=None,
        metavar="FILE",
        help="append this run's own per-request stage clock to FILE (JSON line)",
    )
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    ap.add_argument("--fail-after", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("error: --device cuda but CUDA is not available", file=sys.stderr)
        return 2
    device = torch.device(args.device)
    rng = random.Random(args.seed)
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    tok = train_tokenizer(random.Random(args.seed + 1))
    model = Encoder(tok.get_vocab_size()).to(device).eval()
    sync = device.type == "cuda"

    # Warm-up: first calls pay one-off costs (allocator, op dispatch caches, profiler set-up);
    # a service warms up before it takes traffic, so these are not requests.
    for _ in range(args.warmup):
        texts = [make_text(rng) for _ in range(args.max_batch)]
        batch = preprocess(tok, texts, args.padding, device)
        with torch.inference_mode():
            logits, hidden = model(batch["ids"], batch["mask"])
        postprocess(tok, batch, logits, hidden)

    times: list[dict[str, float]] = []
    inner_times: list[dict[str, float]] = []
    masks: list[dict[str, Any]] = []
    for r in range(args.requests):
        if args.fail_after is not None and r == args.fail_after:
            raise RuntimeError(f"simulated failure at request {r}")
        texts = [make_text(rng) for _ in range(rng.randint(1, args.max_batch))]
        ms: dict[str, float] = {}  # around each `with stage`: includes annotation cost
        inner: dict[str, float] = {}  # inside it: the work alone
        with request(request=r, batch=len(texts)):
            t0 = time.perf_counter_ns()
            with stage("preprocess", sync=sync) as s:
                t1 = time.perf_counter_ns()
                batch = preprocess(tok, texts, args.padding, device)
                s.set(batch=len(texts), seq_len=batch["seq_len"], tokens=batch["tokens"],
                      padded_tokens=batch["padded_tokens"], lengths=batch["lengths"])  # fmt: skip
                inner["preprocess"] = (time.perf_counter_ns() - t1) / 1e6
            ms["preprocess"] = (time.perf_counter_ns() - t0) / 1e6
            t0 = time.perf_counter_ns()
            with stage("inference", sync=sync, batch=len(texts)):
                t1 = time.perf_counter_ns()
                with torch.inference_mode():
                    logits, hidden = model(batch["ids"], batch["mask"])
                if sync:
                    torch.cuda.synchronize()
                inner["inference"] = (time.perf_counter_ns() - t1) / 1e6
            ms["inference"] = (time.perf_counter_ns() - t0) / 1e6
            t0 = time.perf_counter_ns()
            with stage("postprocess", sync=sync):
                t1 = time.perf_counter_ns()
                out = postprocess(tok, batch, logits, hidden)
                inner["postprocess"] = (time.perf_counter_ns() - t1) / 1e6
            ms["postprocess"] = (time.perf_counter_ns() - t0) / 1e6
        ms["output_bytes"] = len(out)
        # the attention mask the model saw, row by row (a test's oracle for padding shares)
        rows, padded_len = batch["mask"].shape
        masks.append({"rows": rows, "padded_len": padded_len,
                      "row_sums": [int(x) for x in batch["mask"].sum(dim=1).tolist()]})  # fmt: skip
        times.append(ms)
        inner_times.append(inner)

    n = max(len(times), 1)
    means = {st: round(sum(t[st] for t in times) / n, 4) for st in STAGES}
    print(f"{len(times)} requests, padding={args.padding}, device={device.type}")
    for st in STAGES:
        print(f"  {st:<12} {means[st]:9.3f} ms/request")
    inner_means = {st: round(sum(t[st] for t in inner_times) / n, 4) for st in STAGES}
    record = {"inner_mean_ms": inner_means, "padding": args.padding, "device": device.type,
              "mean_ms": means, "masks": masks,
              "requests": [{st: round(t[st], 4) for st in STAGES} for t in times]}  # fmt: skip
    if args.self_times is not None:
        with open(args.self_times, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
