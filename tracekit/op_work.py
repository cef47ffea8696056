"""The work an operator needs, from the input shapes torch.profiler records (record_shapes=True):
floating-point operations (FLOPs; a multiply-add is 2) and the minimum bytes it must move (each
input read once, the output written once). One formula per op below; `op_work` picks it by the
op's name. Shapes are logical (a transposed view is recorded with its transposed dims), so
transposes need no special case.

Conventions (docs/report.md, "Roofline"):
- GEMMs (mm, addmm, bmm, baddbmm, linear, matmul): 2·M·N·K per matrix product; a bias or
  `beta·C` add is counted in bytes, not FLOPs.
- attention (scaled_dot_product_attention and its flash / efficient / cuDNN kernels): Q·Kᵀ and
  P·V, 2·Lq·Lk·(d + dv) per batch and head; causal keeps the pairs on or under the diagonal
  (top-left aligned, as PyTorch's is_causal).
- softmax: 5 FLOPs per element (max, subtract, exp, sum, divide).
- layer_norm: 5 per element, +1 each for weight and bias; rms_norm: 4, +1 for weight.
- elementwise ops: 1 FLOP per output element (transcendentals too: these ops are about bytes).
- embedding: no FLOPs; bytes = indices read + the rows gathered + the output written.
- convolution: 2·N·Cout·(output positions)·(Cin/groups)·(kernel positions); needs the recorded
  stride/padding/dilation ("Concrete Inputs"), else no figure.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

# torch.profiler "Input type" -> (short dtype, bytes per element)
DTYPES: dict[str, tuple[str, int]] = {
    "float": ("fp32", 4),
    "double": ("fp64", 8),
    "c10::Half": ("fp16", 2),
    "c10::BFloat16": ("bf16", 2),
    "c10::Float8_e4m3fn": ("fp8", 1),
    "c10::Float8_e5m2": ("fp8", 1),
    "c10::Float8_e4m3fnuz": ("fp8", 1),
    "c10::Float8_e5m2fnuz": ("fp8", 1),
    "long int": ("int64", 8),
    "int": ("int32", 4),
    "short int": ("int16", 2),
    "signed char": ("int8", 1),
    "unsigned char": ("uint8", 1),
    "bool": ("bool", 1),
    "c10::complex<float>": ("complex64", 8),
    "c10::complex<double>": ("complex128", 16),
}


@dataclass(frozen=True)
class Work:
    """What one call of an op needs."""

    kind: str  # gemm | attention | softmax | norm | elementwise | embedding | conv
    flops: float
    bytes: float
    dtype: str  # the compute dtype (of the first tensor input): fp32, bf16, fp16, fp8 ...


@dataclass(frozen=True)
class Call:
    """One recorded call: its inputs' dims, types and concrete (scalar) values."""

    dims: Sequence[Any]
    types: Sequence[Any]
    concrete: Sequence[Any]

    def tensor(self, i: int) -> list[int] | None:
        """Input i's shape when it is a tensor of a known dtype (a 0-d tensor: [])."""
        if i >= len(self.dims) or i >= len(self.types) or self.types[i] not in DTYPES:
            return None
        d = self.dims[i]
        return [int(x) for x in d] if isinstance(d, list) else None

    def size(self, i: int) -> int:
        """Bytes per element of input i (0 when it is not a tensor)."""
        return DTYPES[self.types[i]][1] if self.tensor(i) is not None else 0

    def nbytes(self, i: int) -> int:
        t = self.tensor(i)
        return 0 if t is None else math.prod(t) * self.size(i)

    def value(self, i: int) -> str | None:
        """Input i's concrete value as recorded ('True', '[1, 1]', '0.125'); None if absent."""
        if i >= len(self.concrete) or self.concrete[i] in (None, ""):
            return None
        return str(self.concrete[i])

    def ints(self, i: int) -> list[int] | None:
        v = self.value(i)
        if v is None:
            return None
        try:
            return [int(x) for x in v.strip("[]").split(",") if x.strip()]
        except ValueError:
            return None

    def flag(self, i: int) -> bool:
        return self.value(i) == "True"

    @property
    def dtype(self) -> str:
        return next((DTYPES[t][0] for t in self.types if t in DTYPES), "")


def _matmul_dims(a: list[int], b: list[int]) -> tuple[int, int, int, int] | None:
    """(batch, M, N, K) of torch.matmul(a, b), broadcasting batch dims; None if they disagree."""
    if not a or not b:
        return None
    a2 = [1, *a] if len(a) == 1 else a
    b2 = [*b, 1] if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        return None
    ba, bb = a2[:-2], b2[:-2]
    n = max(len(ba), len(bb))
    ba, bb = [1] * (n - len(ba)) + ba, [1] * (n - len(bb)) + bb
    if any(x != y and 1 not in (x, y) for x, y in zip(ba, bb, strict=True)):
        return None
    batch = math.prod(max(x, y) for x, y in zip(ba, bb, strict=True))
    if len(b) == 2 and len(a) > 2:  # [..., m, k] @ [k, n]: one GEMM of prod(...)·m rows
        return 1, math.prod(a[:-1]), b2[-1], a2[-1]
    return batch, a2[-2], b2[-1], a2[-1]


def _gemm(c: Call, a: int, b: int, extra: Sequence[int] = ()) -> Work | None:
    ta, tb = c.tensor(a), c.tensor(b)
    if ta is None or tb is None:
        return None
    dims = _matmul_dims(ta, tb)
    if dims is None:
        return None
    batch, m, n, k = dims
    out = batch * m * n * c.size(a)
    moved = c.nbytes(a) + c.nbytes(b) + out + sum(c.nbytes(i) for i in extra)
    return Work("gemm", 2.0 * batch * m * n * k, float(moved), c.dtype)


def mm(c: Call) -> Work | None:  # mm(a, b), bmm(a, b), matmul(a, b)
    return _gemm(c, 0, 1)


def addmm(c: Call) -> Work | None:  # addmm(bias, a, b, beta, alpha), baddbmm(c, a, b, ...)
    return _gemm(c, 1, 2, extra=(0,))


def linear(c: Call) -> Work | None:  # linear(x[..., k], w[n, k], bias[n]?)
    x, w = c.tensor(0), c.tensor(1)
    if x is None or w is None or len(w) != 2 or not x or x[-1] != w[1]:
        return None
    m, n, k = math.prod(x[:-1]), w[0], w[1]
    moved = c.nbytes(0) + c.nbytes(1) + c.nbytes(2) + m * n * c.size(0)
    return Work("gemm", 2.0 * m * n * k, float(moved), c.dtype)


def causal_pairs(lq: int, lk: int) -> int:
    """Query-key pairs a top-left aligned causal mask keeps: row i sees keys 0..i."""
    return sum(min(i + 1, lk) for i in range(lq))


def _attention(c: Call, seq_first: bool, causal_at: int, mask_at: int | None) -> Work | None:
    q, k, v = c.tensor(0), c.tensor(1), c.tensor(2)
    if q is None or k is None or v is None or len(q) != 4 or len(k) != 4 or len(v) != 4:
        return None
    if seq_first:  # [B, L, H, d] (the _flash/_efficient_attention_forward layout)
        b, lq, h, d = q
        lk, dv = k[1], v[3]
    else:  # [B, H, L, d]
        b, h, lq, d = q
        lk, dv = k[2], v[3]
    pairs = causal_pairs(lq, lk) if c.flag(causal_at) else lq * lk
    flops = 2.0 * b * h * pairs * (d + dv)
    out = b * h * lq * dv * c.size(0)
    mask = c.nbytes(mask_at) if mask_at is not None else 0
    moved = c.nbytes(0) + c.nbytes(1) + c.nbytes(2) + mask + out
    return Work("attention", flops, float(moved), c.dtype)


def sdpa(c: Call) -> Work | None:  # (q, k, v, attn_mask, dropout_p, is_causal, scale, gqa)
    return _attention(c, False, 5, 3)


def sdpa_flash(c: Call) -> Work | None:  # (q, k, v, dropout_p, is_causal, debug_mask, scale)
    return _attention(c, False, 4, None)


def sdpa_efficient(c: Call) -> Work | None:  # (q, k, v, attn_bias, lse, dropout_p, is_causal ..)
    return _attention(c, False, 6, 3)


def flash_forward(c: Call) -> Work | None:  # (q, k, v, cu_q, cu_k, max_q, max_k, p, is_causal)
    return _attention(c, True, 8, None)


def softmax(c: Call) -> Work | None:  # softmax(x, dim, dtype) / _softmax(x, dim, half_to_float)
    x = c.tensor(0)
    if x is None:
        return None
    n = math.prod(x)
    return Work("softmax", 5.0 * n, 2.0 * c.nbytes(0), c.dtype)


def _norm(c: Call, per_element: int, affine: Sequence[int]) -> Work | None:
    x = c.tensor(0)
    if x is None:
        return None
    n = math.prod(x)
    present = [i for i in affine if c.tensor(i) is not None]
    flops = float(n * (per_element + len(present)))
    return Work("norm", flops, float(2 * c.nbytes(0) + sum(c.nbytes(i) for i in present)),
                c.dtype)  # fmt: skip


def layer_norm(c: Call) -> Work | None:  # (x, normalized_shape, weight, bias, eps, ...)
    return _norm(c, 5, (2, 3))


def rms_norm(c: Call) -> Work | None:  # (x, normalized_shape, weight, eps)
    return _norm(c, 4, (2,))


def _broadcast(shapes: Sequence[list[int]]) -> list[int]:
    n = max(len(s) for s in shapes)
    padded = [[1] * (n - len(s)) + s for s in shapes]
    return [max(col) for col in zip(*padded, strict=True)] if n else []


def elementwise(c: Call) -> Work | None:
    """Unary/binary ops on tensors (Scalar arguments are not tensors): 1 FLOP per output
    element; bytes = every tensor input + the output (in the first input's dtype)."""
    idx = [i for i in range(len(c.dims)) if c.tensor(i) is not None]
    if not idx:
        return None
    out = math.prod(_broadcast([c.tensor(i) or [] for i in idx]))
    moved = sum(c.nbytes(i) for i in idx) + out * c.size(idx[0])
    return Work("elementwise", float(out), float(moved), c.dtype)


def embedding(c: Call) -> Work | None:  # embedding(weight[V, d], indices[...], ...)
    w, ids = c.tensor(0), c.tensor(1)
    if w is None or ids is None or len(w) != 2:
        return None
    rows = math.prod(ids)
    moved = c.nbytes(1) + 2 * rows * w[1] * c.size(0)  # rows read + output written
    return Work("embedding", 0.0, float(moved), DTYPES[c.types[0]][0])


def _conv(c: Call, stride_at: int, pad_at: int, dil_at: int, groups_at: int,
          transposed_at: int | None = None) -> Work | None:  # fmt: skip
    x, w = c.tensor(0), c.tensor(1)
    if x is None or w is None or len(x) < 3 or len(x) != len(w):
        return None
    if transposed_at is not None and c.flag(transposed_at):
        return None  # a transposed convolution's output size needs output_padding: not modeled
    nsp = len(x) - 2
    stride, dil = c.ints(stride_at), c.ints(dil_at)
    pad_text = c.value(pad_at)
    groups = c.ints(groups_at)
    if stride is None or dil is None or pad_text is None or not groups:
        return None  # stride/padding/dilation not recorded (traces without Concrete Inputs)
    stride = stride * nsp if len(stride) == 1 else stride
    dil = dil * nsp if len(dil) == 1 else dil
    kernel = w[2:]
    if pad_text in ("same", "valid"):
        pads = [
            ((k - 1) * d) // 2 if pad_text == "same" else 0
            for k, d in zip(kernel, dil, strict=True)
        ]
    else:
        pads = c.ints(pad_at) or []
        pads = pads * nsp if len(pads) == 1 else pads
    if not (len(stride) == len(dil) == len(pads) == nsp):
        return None
    out_sp = [(i + 2 * p - d * (k - 1) - 1) // s + 1
              for i, p, d, k, s in zip(x[2:], pads, dil, kernel, stride, strict=True)]  # fmt: skip
    if pad_text == "same":
        out_sp = list(x[2:])
    n, cout = x[0], w[0]
    flops = 2.0 * n * cout * math.prod(out_sp) * w[1] * math.prod(kernel)
    moved = c.nbytes(0) + c.nbytes(1) + c.nbytes(2) + n * cout * math.prod(out_sp) * c.size(0)
    return Work("conv", flops, float(moved), c.dtype)


def conv(c: Call) -> Work | None:  # conv1d/2d/3d(x, w, bias, stride, padding, dilation, groups)
    return _conv(c, 3, 4, 5, 6)


def convolution(c: Call) -> Work | None:  # (x, w, bias, stride, pad, dil, transposed, opad, g)
    return _conv(c, 3, 4, 5, 8, transposed_at=6)


def cudnn_convolution(c: Call) -> Work | None:  # (x, w, padding, stride, dilation, groups, ...)
    return _conv(c, 3, 2, 4, 5)


def miopen_convolution(c: Call) -> Work | None:  # (x, w, bias, padding, stride, dilation, g ..)
    return _conv(c, 4, 3, 5, 6)


ELEMENTWISE = (
    "add", "sub", "mul", "div", "rsub", "pow", "neg", "abs", "exp", "log", "sqrt", "rsqrt",
    "reciprocal", "sigmoid", "tanh", "relu", "gelu", "silu", "clamp", "clamp_min", "clamp_max",
    "maximum", "minimum", "where", "threshold", "hardtanh", "sin", "cos", "erf",
)  # fmt: skip
FORMULAS: dict[str, Callable[[Call], Work | None]] = {
    "aten::mm": mm,
    "aten::bmm": mm,
    "aten::matmul": mm,
    "aten::addmm": addmm,
    "aten::baddbmm": addmm,
    "aten::linear": linear,
    "aten::scaled_dot_product_attention": sdpa,
    "aten::_scaled_dot_product_flash_attention": sdpa_flash,
    "aten::_scaled_dot_product_efficient_attention": sdpa_efficient,
    "aten::_scaled_dot_product_cudnn_attention": sdpa_efficient,
    "aten::_flash_attention_forward": flash_forward,
    "aten::softmax": softmax,
    "aten::_softmax": softmax,
    "aten::log_softmax": softmax,
    "aten::_log_softmax": softmax,
    "aten::layer_norm": layer_norm,
    "aten::native_layer_norm": layer_norm,
    "aten::rms_norm": rms_norm,
    "aten::embedding": embedding,
    "aten::conv1d": conv,
    "aten::conv2d": conv,
    "aten::conv3d": conv,
    "aten::convolution": convolution,
    "aten::_convolution": convolution,
    "aten::cudnn_convolution": cudnn_convolution,
    "aten::miopen_convolution": miopen_convolution,
    **{f"aten::{n}": elementwise for n in ELEMENTWISE},
    **{f"aten::{n}_": elementwise for n in ELEMENTWISE},
}


def op_work(name: str, dims: Any, types: Any, concrete: Any = None) -> Work | None:
    """FLOPs and bytes of one call of `name` from its recorded inputs; None when the op has no
    formula or its inputs do not fit one."""
    formula = FORMULAS.get(name)
    if formula is None or not isinstance(dims, list) or not isinstance(types, list):
        return None
    return formula(Call(dims, types, concrete if isinstance(concrete, list) else []))
