"""A small text-generation service on Hugging Face `generate`, with no tracekit in it.

- model: `GPT2LMHeadModel` from a `GPT2Config` (4 layers, random weights from a fixed seed);
  nothing is downloaded (HF_HUB_OFFLINE is set).
- tokenizer: a word-level `PreTrainedTokenizerFast` over a vocabulary made at start-up.
- requests: each one a batch of `--batch` prompts of `--prompt-words` words; `serve(prompts)`
  runs `tokenize` (the tokenizer's `__call__`), `generate` (greedy, exactly `--new-tokens`
  tokens: prefill, then one model forward per further token) and `detokenize` (`batch_decode`).

The service keeps its own clock: each step's time, and, from a streamer that generate calls
with every new token, the time to first token (request start to the first new token) and the
time per output token (mean gap between consecutive new tokens). It prints p50s and, with
`--self-times FILE`, writes one JSON line with every request's figures (ms).

    python examples/generate_service.py --requests 8 --warmup 2
    tracekit capture -- python examples/generate_service.py --requests 8 --warmup 2
    python examples/generate_service.py --torch-profile gen.json   # plain torch.profiler
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402
from tokenizers import Tokenizer, models, pre_tokenizers  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast  # noqa: E402
from transformers.generation.streamers import BaseStreamer  # noqa: E402

WORDS = (
    "the a service request model token answer question user time fast slow queue batch gpu "
    "cpu memory latency prompt reply write read send wait good bad small large first last"
).split()


def make_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {w: i for i, w in enumerate(["[PAD]", "[UNK]", "[EOS]", *WORDS])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]", eos_token="[EOS]",
        padding_side="left",
    )  # fmt: skip


def make_model(vocab_size: int, seed: int) -> GPT2LMHeadModel:
    torch.manual_seed(seed)
    config = GPT2Config(vocab_size=vocab_size, n_positions=512, n_embd=128, n_layer=4, n_head=4)
    return GPT2LMHeadModel(config).eval()


class TokenClock(BaseStreamer):
    """generate() calls put() with the prompt, then with each new token."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.prompt_seen = False

    def put(self, value: Any) -> None:
        if not self.prompt_seen:
            self.prompt_seen = True
            return
        self.times.append(time.perf_counter())

    def end(self) -> None:
        pass


class Service:
    def __init__(self, seed: int, new_tokens: int) -> None:
        self.tok = make_tokenizer()
        self.model = make_model(len(self.tok.get_vocab()), seed)
        self.new_tokens = new_tokens

    def serve(self, prompts: list[str]) -> dict[str, float]:
        t0 = time.perf_counter()
        inputs = self.tok(prompts, return_tensors="pt", padding=True)
        t1 = time.perf_counter()
        clock = TokenClock()
        with torch.inference_mode():
            out = self.model.generate(
                **inputs, max_new_tokens=self.new_tokens, min_new_tokens=self.new_tokens,
                do_sample=False, pad_token_id=self.tok.pad_token_id, streamer=clock,
            )  # fmt: skip
        t2 = time.perf_counter()
        self.tok.batch_decode(out[:, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
        t3 = time.perf_counter()
        gaps = [b - a for a, b in zip(clock.times, clock.times[1:], strict=False)]
        return {
            "request": (t3 - t0) * 1e3,
            "tokenize": (t1 - t0) * 1e3,
            "generate": (t2 - t1) * 1e3,
            "detokenize": (t3 - t2) * 1e3,
            "ttft": (clock.times[0] - t0) * 1e3,
            "tpot": statistics.fmean(gaps) * 1e3 if gaps else 0.0,
            "output_tokens": float(len(clock.times)),
        }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--new-tokens", type=int, default=24)
    ap.add_argument("--prompt-words", type=int, default=24)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--self-times", type=Path, help="append one JSON line of per-request ms")
    ap.add_argument("--torch-profile", type=Path, help="record a plain torch.profiler trace here")
    args = ap.parse_args()
    torch.set_num_threads(1)
    svc = Service(args.seed, args.new_tokens)
    rng = random.Random(args.seed)
    prompts = [
        [" ".join(rng.choice(WORDS) for _ in range(args.prompt_words)) for _ in range(args.batch)]
        for _ in range(args.warmup + args.requests)
    ]
    rows = [dict(svc.serve(p), warmup=True) for p in prompts[: args.warmup]]
    if args.torch_profile:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
            for p in prompts[args.warmup :]:
                rows.append(dict(svc.serve(p), warmup=False))
                prof.step()
        prof.export_chrome_trace(str(args.torch_profile))
    else:
        rows += [dict(svc.serve(p), warmup=False) for p in prompts[args.warmup :]]
    measured = [r for r in rows if not r["warmup"]]
    for key in ("request", "tokenize", "generate", "detokenize", "ttft", "tpot"):
        print(f"{key:>10} p50 {statistics.median(r[key] for r in measured):8.3f} ms")
    if args.self_times:
        with args.self_times.open("a") as fh:
            fh.write(json.dumps({"requests": rows}) + "\n")


if __name__ == "__main__":
    main()
