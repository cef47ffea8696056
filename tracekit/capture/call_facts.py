"""Cheap facts about a call wrapped by `--stage`/`--request`, recorded as range attributes.

Without code, the only thing tracekit sees of a wrapped call is its arguments and its return
value. A few facts about them are enough to tie time to input size:

- `<name>.len`: `len()` of a str, list, tuple or dict argument;
- `<name>.shape`: the shape of a tensor argument (a list), `<name>.numel` its element count;
- for a mapping of tensors (a tokenizer's BatchEncoding, a dict batch): the same per key;
- `<key>.nonzero`: the non-zero count of a 2-D attention-mask-like tensor (a key or argument
  whose name contains `mask`): the real tokens, beside `<key>.numel`, the padded ones; and
  `<key>.lengths`, the non-zero count of each row (up to 1024 rows): each sequence's length;
- `return.*`: the same for the return value.

Argument names come from the function's signature (`args[i]` when it has none). Anything else
(models, tokenizers, `self`) is ignored. Cost: a few µs per call, plus one `count_nonzero` op per
mask tensor; computed only while a capture's attribute sidecar is on.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

MAX_KEYS = 8  # facts from at most this many entries of one mapping
MAX_ROWS = 1024  # a mask's per-row lengths recorded up to this many rows


def _tensor_facts(name: str, value: Any, out: dict[str, Any]) -> bool:
    shape = getattr(value, "shape", None)
    numel = getattr(value, "numel", None)
    if shape is None or not callable(numel) or not hasattr(value, "dtype"):
        return False
    out[f"{name}.shape"] = [int(d) for d in shape]
    out[f"{name}.numel"] = int(numel())
    if "mask" in name.rsplit(".", 1)[-1].lower() and len(shape) == 2:
        try:
            out[f"{name}.nonzero"] = int(value.count_nonzero())
            if int(shape[0]) <= MAX_ROWS:  # each row's real tokens (attention FLOPs: l^2 each)
                out[f"{name}.lengths"] = [int(x) for x in (value != 0).sum(dim=1).tolist()]
        except (RuntimeError, TypeError, AttributeError):
            pass
    return True


def _facts_of(name: str, value: Any, out: dict[str, Any], depth: int = 0) -> None:
    if isinstance(value, (str, bytes, list, tuple)):
        out[f"{name}.len"] = len(value)
        return
    if _tensor_facts(name, value, out):
        return
    if isinstance(value, Mapping) and depth == 0:
        out[f"{name}.len"] = len(value)
        for key in list(value.keys())[:MAX_KEYS]:
            if isinstance(key, str):
                _facts_of(key if name in ("", "return") else f"{name}.{key}", value[key], out, 1)


def param_names(fn: Callable[..., Any]) -> list[str]:
    """Positional parameter names of `fn` ([] when it has no readable signature)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def call_facts(
    names: list[str], args: tuple[Any, ...], kwargs: dict[str, Any], result: Any
) -> dict[str, Any]:
    """Facts about one call (see the module docstring); never raises."""
    out: dict[str, Any] = {}
    try:
        for i, value in enumerate(args):
            name = names[i] if i < len(names) else f"args[{i}]"
            if name not in ("self", "cls"):
                _facts_of(name, value, out)
        for name, value in kwargs.items():
            _facts_of(name, value, out)
        _facts_of("return", result, out)
    except Exception:  # a user object with a broken __len__ must not break the program
        pass
    return out
