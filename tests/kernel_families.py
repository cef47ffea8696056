"""An independent expected category for a GPU kernel, from its name (and launching op).

Written apart from tracekit/categories.toml, in another way (the kernel's identity split
into lowercase words, then sets of words and prefixes), so a test can hold tracekit's
classification to it. Kept to the families of the shared traces' kernels; a kernel it does
not know is "other".
"""

from __future__ import annotations

import re

_ANON = ("(anonymous namespace)::", "<unnamed>::")


def identity(name: str) -> tuple[list[str], str, str]:
    """(namespaces, function name, first template argument) of a demangled kernel name."""
    s = name
    for a in _ANON:
        s = s.replace(a, "")
    if s.startswith("std::enable_if<"):
        s = s[s.index(">::type ") + len(">::type ") :]
    for ret in ("void ", "int ", "float ", "auto "):
        if s.startswith(ret):
            s = s[len(ret) :]
    head = re.split(r"[<(]", s, maxsplit=1)[0].strip()
    first_arg = ""
    if len(s) > len(head) and s[len(head)] == "<":
        # the first template argument that is not a number (ck_tile::kentry<2, ck_tile::X<...>>)
        words = (w.strip() for w in re.split(r"[,<>()]", s[len(head) + 1 :]))
        first_arg = next((w for w in words if w and not w[0].isdigit()), "")
    parts = head.split("::")
    return [p.lower() for p in parts[:-1]], parts[-1], first_arg


def _has(ident: str, *words: str) -> bool:
    low = ident.lower()
    return any(w in low for w in words)


def expected_category(name: str, op: str | None) -> str:
    ns, fn, arg = identity(name)
    f = fn.lower()
    a = arg.lower()
    # families that say what they compute, whatever launched them
    if f.startswith(("nccl", "rccl", "msccl")) or f in {
        "cross_device_reduce", "one_shot_all_reduce", "two_shot_all_reduce"
    }:  # fmt: skip
        return "communication"
    if (
        _has(
            f,
            "layer_norm",
            "layernorm",
            "rms_norm",
            "rmsnorm",
            "groupnorm",
            "group_norm",
            "batch_norm",
            "batchnorm",
            "qknorm",
            "gammabeta",
            "rowwisemoments",
        )  # fmt: skip
        or ns[:1] == ["cudnn"]
        and f.startswith("bn_")
        or f.startswith("_zn5aiter")
        and "rmsnorm" in f
        or f.startswith("kernel_cutlass_kernel_flashinfernorm")
        or f.startswith(("triton_red_", "triton_per_"))
        and "layer_norm" in f
    ):
        return "normalization"
    if (
        ns[:1] in (["flash"], ["pytorch_flash"])
        or f.startswith(
            (
                "flash_fwd",
                "flash_bwd",
                "fmha",
                "mha_",
                "attn_fwd",
                "attn_bwd",
                "sage_fwd",
                "sage_quant",
                "paged_attention",
            )
        )  # fmt: skip
        or "_attention" in f
        or ns[:1] == ["ck_tile"]
        and a.startswith("ck_tile::fmha")
    ):
        return "attention"
    if (
        "_scudnn" in f
        or f.startswith("scudnn")
        or re.match(r"sm\d+_xmma_(fprop|dgrad|wgrad)", f)
        or f.startswith(("implicit_convolve", "explicit_convolve", "igemm_fwd", "im2d2col"))
        or ns[:1] == ["cudnn"]
        and len(ns) > 1
        and ns[1] in {"detail", "cnn"}
        or ns[:1] == ["cudnn"]
        and len(ns) > 1
        and ns[1].startswith("winograd")
        or ns[:1]
        and ns[0].startswith("cutlass")
        and _has(a, "fprop", "dgrad", "wgrad")
        or f.startswith("_zn")
        and "conv" in f
        and ("cutlass_cudnn" in f or "ck16" in f)
        or re.match(r"fft\dd_(r2c|c2r|c2c)", f)
        or ns[:1]
        and ns[0].startswith("cask_")
    ):
        return "convolution"
    if ns[:1] == ["fbgemm_gpu"] or f.startswith(
        (
            "split_embedding",
            "permute_pooled_embs",
            "bounds_check_indices",
            "linearize_index",
            "recat_copy",
        )  # fmt: skip
    ):
        return "embedding"
    # the launching op breaks the tie for generic kernels
    if op:
        if op.startswith(("nccl:", "c10d::", "record_param_comms")):
            return "communication"
        if "scaled_dot_product" in op or "attention" in op.lower() or op in {
            "aten::bmm", "aten::baddbmm", "aten::_softmax", "aten::softmax"
        }:  # fmt: skip
            return "attention"
        if re.match(r"aten::(conv|cudnn_conv|_convolution|convolution|miopen_conv)", op):
            return "convolution"
        if re.match(r"aten::(native_|cudnn_|miopen_)?(layer|group|batch|rms|instance)_norm", op):
            return "normalization"
        if op in {"aten::mm", "aten::addmm", "aten::matmul", "aten::linear", "aten::_scaled_mm",
                  "aten::addmv", "aten::mv"}:  # fmt: skip
            return "GEMM"
    if (
        re.match(r"(maxwell|pascal|volta|turing|ampere|hopper|sm\d+)_\w*gemm", f)
        or f.startswith(
            (
                "nvjet_",
                "cijk_",
                "bmm_",
                "gemv",
                "gemmk",
                "magma_",
                "sgemm_",
                "splitkreduce",
                "xmma_",
                "cutlass_",
            )
        )  # fmt: skip
        or ns[:1]
        and ns[0].startswith("cutlass")
        or ns[:1] == ["ck"]
        and f.startswith("kernel_")
        and "gemm" in f
        or ns[:2] == ["internal", "gemvx"]
        or ns[:2] == ["epilogue", "impl"]
        or ns[:1] == ["cublaslt"]
    ):
        return "GEMM"
    elementwise_words = (
        "elementwise", "reduce", "copy", "fill", "index", "indices", "scatter", "gather", "cat",
        "sort", "topk", "softmax", "dropout", "act_and_mul", "silu", "gelu", "rope", "kvcache",
        "transpose", "permute", "quantize", "clamp", "arange", "token_ids", "alloc",
        "compute_cuda", "argmax", "argmin", "par_ranged", "par_reduce", "axpy",
    )  # fmt: skip
    if (
        ns[:2] == ["at", "native"]
        or f.startswith(
            (
                "triton_poi_",
                "triton_red_",
                "triton_per_",
                "multi_tensor_apply",
                "cunn_",
                "nchwtonhwc",
                "nhwctonchw",
                "op_generic_tensor",
                "subtensorop",
                "batched_transpose",
                "scal_kernel",
                "_zn5aiter",
            )
        )  # fmt: skip
        or "cub" in ns
        or ns[:1]
        in (
            ["rocprim"],
            ["moe"],
            ["aiter"],
            ["genericreformat"],
            ["cutensor_namespace"],
        )  # fmt: skip
        or ns[:2] == ["cudnn", "ops"]
        or ns[:2] == ["cudnn", "engines_precompiled"]
        or ns[:1] == ["ck_tile"]
        and a.startswith("ck_tile::moe")
        or _has(f, *elementwise_words)
    ):
        return "elementwise/reduction"
    return "other"
