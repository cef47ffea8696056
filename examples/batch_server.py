"""A small batched inference server under load, annotated with tracekit's serving API.

Clients on several threads send support-ticket texts with Poisson arrivals; one worker thread
runs a dynamic batcher: it takes the first waiting request, waits up to `--max-wait-ms` for
more (at most `--max-batch` in all), and serves them together:

- preprocess: text cleaning, WordPiece tokenization (a `tokenizers` tokenizer trained at
  start-up on a generated corpus: nothing is downloaded), padding to the batch's longest text
  (`--padding longest`) or to the next length bucket (`--padding bucket`), tensors;
- generation with a small GPT-2-style decoder built from a config (random weights from a
  fixed seed), greedy, `--new-tokens` tokens for every request of the batch:
  - prefill: a forward pass over the padded batch, and each text's first token picked from
    the logits at its last real token (the first token is out when the prefill ends);
  - decode: one step per further token, each a forward pass over the batch's sequences with
    the tokens made so far (no KV cache: a small model);
- postprocess: the generated tokens decoded, one JSON answer per request.

Each request is `tracekit.request(id=...)` on its client's thread, from arrival to response;
each batch `tracekit.batch(ids)` on the worker's thread, with the stages inside it. With
`--no-annotate` it makes no tracekit call, and a capture names the same parts instead:

    tracekit capture --request batch_server:Server.submit --batch batch_server:Server.run_batch \
        --stage preprocess=batch_server:Server.preprocess \
        --stage prefill=batch_server:Server.prefill \
        --stage decode=batch_server:Server.decode_step \
        --stage postprocess=batch_server:Server.postprocess \
        -- python examples/batch_server.py --no-annotate

Its own clock (time.perf_counter_ns, read last thing inside those ranges): per request the
queue time (arrival -> its batch starts), TTFT (arrival -> its batch's prefill ends: the first
token), TPOT ((its batch's last decode step ends - first token) / (output tokens - 1), output
tokens = 1 + decode steps), the batch time, the hand-back (batch end -> response) and end to
end; requests/s = requests / (first arrival -> last response). These are tracekit's
definitions (docs/queries.md, serving_requests). It prints them, and `--log FILE` writes them
and the batches (members, padded length, real and padded tokens) as JSON, so a test can hold
a trace of this run to it.

`--warmup N`: each client first sends N requests one at a time (ids `warmup-<client>-<k>`),
then all start the measured load together; the warm-up requests and the batches that served
them are left out of the printed figures and the log (`tracekit ... --warmup` drops them from
a trace: the first clients x N requests by arrival).

Arrivals: each of `--clients` threads draws exponential gaps at rate `--rate / --clients`
(together a Poisson process at `--rate`); a client whose previous request is still waiting
sends its next one as soon as that answer comes (a closed loop once the server saturates).

    python examples/batch_server.py --requests 64 --rate 300 --max-batch 8 --max-wait-ms 10
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import queue
import random
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from infer import BUCKETS, clean_text, make_text, train_tokenizer  # noqa: E402

import tracekit  # noqa: E402

MAX_LEN = 128
MAX_NEW = 64  # --new-tokens at most (the model's positions: MAX_LEN + MAX_NEW)
ANNOTATE = True  # --no-annotate: no tracekit calls (capture --request/--batch/--stage instead)


def stage(name: str) -> Any:
    """tracekit.stage, or a range that records nothing under --no-annotate."""
    return tracekit.stage(name) if ANNOTATE else _Quiet()


class _Quiet(contextlib.nullcontext[Any]):
    def __enter__(self) -> _Quiet:
        return self

    def set(self, **attrs: Any) -> None:
        pass


@dataclass(frozen=True)
class GPTConfig:
    """The model's shape (GPT-2's layout, a few layers: fast on a CPU)."""

    vocab_size: int
    n_positions: int = MAX_LEN + MAX_NEW
    n_embd: int = 128
    n_layer: int = 2
    n_head: int = 4


class Block(torch.nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = torch.nn.LayerNorm(cfg.n_embd)
        self.attn = torch.nn.MultiheadAttention(cfg.n_embd, cfg.n_head, batch_first=True)
        self.ln_2 = torch.nn.LayerNorm(cfg.n_embd)
        self.mlp = torch.nn.Sequential(
            torch.nn.Linear(cfg.n_embd, 4 * cfg.n_embd),
            torch.nn.GELU(),
            torch.nn.Linear(4 * cfg.n_embd, cfg.n_embd),
        )

    def forward(self, x: torch.Tensor, causal: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
        h = self.ln_1(x)
        a, _ = self.attn(h, h, h, attn_mask=causal, key_padding_mask=pad, need_weights=False)
        x = x + a
        return x + self.mlp(self.ln_2(x))


class TinyGPT(torch.nn.Module):
    """Token + position embeddings, pre-norm causal blocks, tied LM head."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.wte = torch.nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = torch.nn.Embedding(cfg.n_positions, cfg.n_embd)
        self.h = torch.nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = torch.nn.LayerNorm(cfg.n_embd)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        n = ids.shape[1]
        x = self.wte(ids) + self.wpe(torch.arange(n))
        causal = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)
        pad = mask == 0
        for block in self.h:
            x = block(x, causal, pad)
        return self.ln_f(x) @ self.wte.weight.T  # logits (batch, seq, vocab)


@dataclass
class Pending:
    """One request between its client and the worker."""

    rid: int | str
    text: str
    arrival_ns: int = 0
    response_ns: int = 0
    done: threading.Event = field(default_factory=threading.Event)
    batch: int = 0
    batch_start_ns: int = 0
    batch_end_ns: int = 0
    first_token_ns: int = 0
    last_token_ns: int = 0
    output_tokens: int = 0
    answer: str = ""


def pad_length(longest: int, padding: str) -> int:
    if padding == "longest":
        return min(longest, MAX_LEN)
    return next((b for b in BUCKETS if b >= longest), MAX_LEN)


class Server:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.tok = train_tokenizer(random.Random(args.seed + 1))
        torch.manual_seed(args.seed)
        self.model = TinyGPT(GPTConfig(vocab_size=self.tok.get_vocab_size())).eval()
        self.inbox: queue.Queue[Pending | None] = queue.Queue()
        self.batches: list[dict[str, object]] = []

    def take_batch(self) -> list[Pending] | None:
        """The first waiting request, and up to max_batch - 1 more within max_wait_ms."""
        first = self.inbox.get()
        if first is None:
            return None
        items = [first]
        deadline = time.perf_counter() + self.args.max_wait_ms / 1e3
        while len(items) < self.args.max_batch:
            left = deadline - time.perf_counter()
            try:
                nxt = self.inbox.get(timeout=left) if left > 0 else self.inbox.get_nowait()
            except queue.Empty:
                break
            if nxt is None:  # the clients are done: serve what is here, then stop
                self.inbox.put(None)
                break
            items.append(nxt)
        return items

    def serve(self) -> None:
        torch.set_num_threads(1)
        while (items := self.take_batch()) is not None:
            if ANNOTATE:
                with tracekit.batch([p.rid for p in items]):
                    self.run_batch(items)
            else:
                self.run_batch(items)
            for p in items:  # the answers go back once the batch is over
                p.done.set()

    def run_batch(self, items: list[Pending]) -> None:
        """One batch: its own clock is read first and last thing inside (`--batch` target)."""
        start = time.perf_counter_ns()
        number = len(self.batches) + 1
        with stage("preprocess") as s:
            enc = self.preprocess([p.text for p in items])
            s.set(batch_size=len(items), seq_len=enc["seq_len"],
                  padded_tokens=enc["padded_tokens"])  # fmt: skip
        with torch.inference_mode():
            with stage("prefill"):
                gen = self.prefill(enc)
            for _ in range(self.args.new_tokens - 1):
                with stage("decode"):
                    self.decode_step(gen)
        with stage("postprocess"):
            answers = self.postprocess(gen)
        end = time.perf_counter_ns()
        self.batches.append({
            "batch": number, "requests": [p.rid for p in items], "size": len(items),
            "start_ns": start, "end_ns": end, "seq_len": enc["seq_len"],
            "tokens": enc["tokens"], "padded_tokens": enc["padded_tokens"],
        })  # fmt: skip
        for p, answer in zip(items, answers, strict=True):
            p.batch, p.batch_start_ns, p.batch_end_ns, p.answer = number, start, end, answer
            p.first_token_ns, p.last_token_ns = gen.first_token_ns, gen.last_token_ns
            p.output_tokens = len(gen.out[0])

    def submit(self, p: Pending) -> None:
        """One request: hand it to the batcher, wait for its answer (`--request` target); the
        own clock is read first and last thing inside."""
        p.arrival_ns = time.perf_counter_ns()
        self.inbox.put(p)
        p.done.wait()
        p.response_ns = time.perf_counter_ns()

    def preprocess(self, texts: list[str]) -> dict[str, object]:
        encs = self.tok.encode_batch([clean_text(t) for t in texts])
        cls, sep, pad = (self.tok.token_to_id(t) for t in ("[CLS]", "[SEP]", "[PAD]"))
        seqs = [[cls, *e.ids[: MAX_LEN - 2], sep] for e in encs]
        length = pad_length(max(len(s) for s in seqs), self.args.padding)
        ids = torch.full((len(seqs), length), pad, dtype=torch.long)
        mask = torch.zeros((len(seqs), length), dtype=torch.long)
        for i, s in enumerate(seqs):
            ids[i, : len(s)] = torch.tensor(s, dtype=torch.long)
            mask[i, : len(s)] = 1
        real = int(mask.sum())
        return {"ids": ids, "mask": mask, "seq_len": length, "tokens": real,
                "padded_tokens": ids.numel() - real}  # fmt: skip

    def prefill(self, enc: dict[str, Any]) -> Generation:
        """The padded batch's forward pass and each text's first token (greedy, at its last
        real token); the first token's clock is read last thing (`prefill` stage)."""
        ids, mask = enc["ids"], enc["mask"]
        lengths = mask.sum(dim=1)
        # room for the new tokens: sequence i's k-th new token goes at lengths[i] + k
        room = self.args.new_tokens
        ids = torch.cat([ids, torch.zeros((len(ids), room), dtype=ids.dtype)], dim=1)
        mask = torch.cat([mask, torch.zeros((len(mask), room), dtype=mask.dtype)], dim=1)
        gen = Generation(ids, mask, lengths, width=int(enc["seq_len"]))
        gen.add(self.model(ids[:, : gen.width], mask[:, : gen.width]))
        gen.first_token_ns = gen.last_token_ns = time.perf_counter_ns()
        return gen

    def decode_step(self, gen: Generation) -> None:
        """One more token for every sequence of the batch (`decode` stage)."""
        gen.add(self.model(gen.ids[:, : gen.width], gen.mask[:, : gen.width]))
        gen.last_token_ns = time.perf_counter_ns()

    def postprocess(self, gen: Generation) -> list[str]:
        return [json.dumps({"text": self.tok.decode(out), "tokens": len(out)}) for out in gen.out]


class Generation:
    """A batch's sequences while tokens are generated (right-padded: each sequence's new
    tokens go right after its own last token, over the padding)."""

    def __init__(self, ids: torch.Tensor, mask: torch.Tensor, lengths: torch.Tensor,
                 width: int) -> None:  # fmt: skip
        self.ids, self.mask, self.lengths, self.width = ids, mask, lengths.clone(), width
        self.out: list[list[int]] = [[] for _ in range(len(ids))]
        self.first_token_ns = self.last_token_ns = 0

    def add(self, logits: torch.Tensor) -> None:
        """Pick each sequence's next token at its last real position; append it."""
        rows = torch.arange(len(self.lengths))
        nxt = logits[rows, self.lengths - 1].argmax(dim=-1)
        for i, t in enumerate(nxt.tolist()):
            self.out[i].append(int(t))
        self.ids[rows, self.lengths] = nxt
        self.mask[rows, self.lengths] = 1
        self.lengths += 1
        self.width = max(self.width, int(self.lengths.max()))


def client(server: Server, work: list[tuple[int, float, str]], warmup: list[str],
           start: threading.Barrier, t0: list[float],
           done: list[Pending], lock: threading.Lock) -> None:  # fmt: skip
    for rid in warmup:  # one at a time, before the measured load (not in its figures)
        send(server, Pending(rid, work[0][2] if work else "hello"))
    start.wait()
    for rid, at, text in work:
        delay = t0[0] + at - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        p = Pending(rid, text)
        send(server, p)
        with lock:
            done.append(p)


def send(server: Server, p: Pending) -> None:
    if ANNOTATE:
        with tracekit.request(id=p.rid):
            server.submit(p)
    else:
        server.submit(p)


def quantile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default, DuckDB's quantile_cont)."""
    xs = sorted(values)
    pos = (len(xs) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--rate", type=float, default=300.0, help="mean arrivals per second")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--max-batch", type=int, default=8)
    ap.add_argument("--max-wait-ms", type=float, default=10.0)
    ap.add_argument("--padding", choices=("longest", "bucket"), default="longest")
    ap.add_argument("--new-tokens", type=int, default=8,
                    help=f"tokens generated per request (1 to {MAX_NEW}): a prefill, then a "
                    "decode step per further token")  # fmt: skip
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--warmup",
        type=int,
        default=0,
        help="warm-up requests per client, sent one at a time before the measured "
        "load and left out of its figures and log (their batches too)",
    )
    ap.add_argument("--log", type=Path, help="write requests and batches as JSON here")
    ap.add_argument("--quiet", action="store_true", help="no line per request")
    ap.add_argument(
        "--no-annotate",
        action="store_true",
        help="make no tracekit calls (for tracekit capture --request "
        "batch_server:Server.submit --batch batch_server:Server.run_batch)",
    )
    args = ap.parse_args(argv)
    global ANNOTATE
    ANNOTATE = not args.no_annotate
    if args.requests < 1 or args.clients < 1 or args.max_batch < 1 or args.rate <= 0:
        ap.error("--requests, --clients, --max-batch and --rate must be positive")
    if not 1 <= args.new_tokens <= MAX_NEW:
        ap.error(f"--new-tokens must be 1 to {MAX_NEW}")

    # A thread that wants the GIL waits up to the switch interval per thread ahead of it (5 ms
    # by default): between a range opening and the clock read next to it that put up to 12 ms
    # on this server's own clock with 8 clients. 10 µs keeps its reads beside the ranges.
    sys.setswitchinterval(1e-5)
    server = Server(args)
    rng = random.Random(args.seed)
    texts = [make_text(rng) for _ in range(args.requests)]
    work: list[list[tuple[int, float, str]]] = [[] for _ in range(args.clients)]
    clocks = [0.0] * args.clients
    for rid, text in enumerate(texts):
        c = rid % args.clients
        clocks[c] += rng.expovariate(args.rate / args.clients)
        work[c].append((rid, clocks[c], text))
    with torch.inference_mode():  # warm the model up outside every request (first-call costs)
        server.postprocess(server.prefill(server.preprocess(texts[:2])))

    worker = threading.Thread(target=server.serve, name="batcher")
    worker.start()
    done: list[Pending] = []
    lock = threading.Lock()
    t0: list[float] = []  # the measured load's start, once every client has warmed up
    start = threading.Barrier(args.clients, action=lambda: t0.append(time.perf_counter() + 0.005))
    warmups = [[f"warmup-{i}-{k}" for k in range(args.warmup)] for i in range(args.clients)]
    threads = [threading.Thread(target=client, args=(server, w, warmups[i], start, t0, done, lock),
                                name=f"client-{i}")
               for i, w in enumerate(work)]  # fmt: skip
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    server.inbox.put(None)
    worker.join()

    done.sort(key=lambda p: (p.arrival_ns, str(p.rid)))
    requests = [{
        "request": p.rid, "batch": p.batch, "arrival_ns": p.arrival_ns,
        "batch_start_ns": p.batch_start_ns, "batch_end_ns": p.batch_end_ns,
        "response_ns": p.response_ns,
        "queue_ms": (p.batch_start_ns - p.arrival_ns) / 1e6,
        "ttft_ms": (p.first_token_ns - p.arrival_ns) / 1e6,
        "output_tokens": p.output_tokens,
        "tpot_ms": ((p.last_token_ns - p.first_token_ns) / (p.output_tokens - 1) / 1e6
                    if p.output_tokens > 1 else None),
        "batch_ms": (p.batch_end_ns - p.batch_start_ns) / 1e6,
        "hand_back_ms": (p.response_ns - p.batch_end_ns) / 1e6,
        "end_to_end_ms": (p.response_ns - p.arrival_ns) / 1e6,
    } for p in done]  # fmt: skip
    window_s = (max(r["response_ns"] for r in requests) - requests[0]["arrival_ns"]) / 1e9
    measured = {r["request"] for r in requests}
    server.batches = [b for b in server.batches
                      if measured & set(b["requests"])]  # type: ignore[call-overload]  # fmt: skip
    sizes = [int(b["size"]) for b in server.batches]  # type: ignore[call-overload]
    tokens = sum(int(b["tokens"]) for b in server.batches)  # type: ignore[call-overload]
    padded = sum(int(b["padded_tokens"]) for b in server.batches)  # type: ignore[call-overload]
    summary: dict[str, float] = {"requests": len(requests), "batches": len(server.batches),
                                 "window_s": window_s, "requests_per_s": len(requests) / window_s,
                                 "mean_batch": sum(sizes) / len(sizes),
                                 "padding_share": padded / (tokens + padded)}  # fmt: skip
    summary["output_tokens_per_s"] = sum(int(r["output_tokens"]) for r in requests) / window_s
    for part in ("queue_ms", "ttft_ms", "tpot_ms", "batch_ms", "hand_back_ms", "end_to_end_ms"):
        values = [float(r[part]) for r in requests if r[part] is not None]
        if not values:
            continue
        for q in (0.5, 0.9, 0.99):
            summary[f"{part[:-3]}_p{round(q * 100)}_ms"] = quantile(values, q)

    if not args.quiet:
        for r in requests:
            print(
                f"request {r['request']:4d}  batch {r['batch']:3d}  queue {r['queue_ms']:8.3f} ms"
                f"  ttft {r['ttft_ms']:8.3f} ms  end to end {r['end_to_end_ms']:8.3f} ms"
            )
    print(
        f"{len(requests)} requests in {len(sizes)} batches (max {args.max_batch}, wait "
        f"{args.max_wait_ms:g} ms, padding {args.padding}): {summary['requests_per_s']:.2f} "
        f"requests/s; mean batch {summary['mean_batch']:.2f}; queue p50 "
        f"{summary['queue_p50_ms']:.3f} ms p99 {summary['queue_p99_ms']:.3f} ms; TTFT p50 "
        f"{summary['ttft_p50_ms']:.3f} ms p99 {summary['ttft_p99_ms']:.3f} ms; "
        + (
            f"TPOT p50 {summary['tpot_p50_ms']:.3f} ms p99 {summary['tpot_p99_ms']:.3f} ms; "
            if "tpot_p50_ms" in summary
            else ""
        )
        + "end to end "
        f"p50 {summary['end_to_end_p50_ms']:.3f} ms p99 {summary['end_to_end_p99_ms']:.3f} ms; "
        f"{summary['padding_share']:.0%} of tokens padding"
    )
    if args.log is not None:
        data = {"summary": summary, "requests": requests, "batches": server.batches}
        tmp = args.log.with_name(f".{args.log.name}.tmp")
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(args.log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
