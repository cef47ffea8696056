"""Each op formula of tracekit.op_work against a hand computation (numbers worked out by hand
in the comments, not by the module); the device-peak table and the roofline verdicts."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracekit.device_peaks import find_device
from tracekit.errors import ConfigError
from tracekit.op_work import op_work
from tracekit.roofline import ENABLE, analyze, verdict

BF16, F32 = "c10::BFloat16", "float"


def test_mm_and_transposed_weight() -> None:
    # [8944,1024] @ [1024,1024] (the weight a transposed view: logical dims as recorded)
    w = op_work("aten::mm", [[8944, 1024], [1024, 1024]], [BF16, BF16], ["", ""])
    assert w is not None and w.kind == "gemm" and w.dtype == "bf16"
    assert w.flops == 2 * 8944 * 1024 * 1024  # 18,756,927,488
    assert w.bytes == 2 * (8944 * 1024 + 1024 * 1024 + 8944 * 1024)


def test_addmm_counts_bias_bytes_not_flops() -> None:
    w = op_work("aten::addmm", [[512], [141, 512], [512, 512], [], []],
                [BF16, BF16, BF16, "Scalar", "Scalar"], ["", "", "", "1", "1"])  # fmt: skip
    assert w is not None
    assert w.flops == 73_924_608  # 2*141*512*512
    assert w.bytes == 2 * (512 + 141 * 512 + 512 * 512 + 141 * 512)  # 813,056


def test_bmm_and_baddbmm() -> None:
    w = op_work("aten::bmm", [[64, 512, 64], [64, 64, 512]], [BF16, BF16])
    assert w is not None and w.flops == 2 * 64 * 512 * 512 * 64  # 2,147,483,648
    assert w.bytes == 2 * (64 * 512 * 64 * 2 + 64 * 512 * 512)
    b = op_work("aten::baddbmm", [[4, 3, 5], [4, 3, 2], [4, 2, 5], [], []],
                [F32, F32, F32, "Scalar", "Scalar"])  # fmt: skip
    assert b is not None and b.flops == 2 * 4 * 3 * 5 * 2 == 240
    assert b.bytes == 4 * (60 + 24 + 40 + 60)


def test_linear_flattens_leading_dims() -> None:
    w = op_work("aten::linear", [[16, 559, 1024], [2816, 1024]], [BF16, BF16])
    assert w is not None and w.flops == 2 * 8944 * 2816 * 1024  # 51,581,550,592
    assert w.bytes == 2 * (8944 * 1024 + 2816 * 1024 + 8944 * 2816)


@pytest.mark.parametrize(
    ("a", "b", "flops"),
    [
        ([1, 512, 4096], [4096, 4096], 2 * 512 * 4096 * 4096),  # one GEMM of 512 rows
        ([1, 32, 1], [1, 1, 559], 2 * 32 * 559),  # batched outer product
        ([3, 1, 4, 5], [2, 5, 6], 2 * 3 * 2 * 4 * 6 * 5),  # broadcast batch 3x2
        ([7], [7], 14),  # dot product
    ],
)
def test_matmul(a: list[int], b: list[int], flops: int) -> None:
    w = op_work("aten::matmul", [a, b], [F32, F32])
    assert w is not None and w.flops == flops


def test_matmul_shape_mismatch_has_no_figure() -> None:
    assert op_work("aten::matmul", [[2, 3], [4, 5]], [F32, F32]) is None


def test_sdpa_full_and_causal() -> None:
    dims = [[16, 16, 559, 64]] * 3 + [[], [], [], [], []]
    types = [BF16] * 3 + ["", "Scalar", "Scalar", "Scalar", "Scalar"]
    full = op_work("aten::scaled_dot_product_attention", dims, types,
                   ["", "", "", "", "0.", "False", "0.125", "False"])  # fmt: skip
    causal = op_work("aten::scaled_dot_product_attention", dims, types,
                     ["", "", "", "", "0.", "True", "0.125", "False"])  # fmt: skip
    assert full is not None and causal is not None and full.kind == "attention"
    # QK^T and PV: 2 * B*H * L*L * (d + dv) = 2*256*312481*128
    assert full.flops == 20_478_754_816  # 312,481 * 65,536
    # causal: row i sees i+1 keys: 559*560/2 = 156,520 pairs
    assert causal.flops == 2 * 256 * 156_520 * 128
    assert full.bytes == 2 * 4 * 16 * 16 * 559 * 64  # q, k, v read + out written


def test_flash_forward_layout_is_seq_first() -> None:
    dims = [[1, 141, 8, 64]] * 3 + [[]] * 12
    concrete = ["", "", "", "", "", "141", "141", "0.", "False", "False", "0.125"] + [""] * 4
    w = op_work("aten::_flash_attention_forward", dims, [BF16] * 3 + ["Scalar"] * 12, concrete)
    assert w is not None and w.flops == 2 * 8 * 141 * 141 * 128


def test_sdpa_with_mask_reads_it() -> None:
    dims = [[2, 4, 16, 8]] * 3 + [[2, 1, 16, 16], [], [], [], []]
    w = op_work("aten::scaled_dot_product_attention", dims,
                [F32] * 4 + ["Scalar", "Scalar", "", "Scalar"],
                ["", "", "", "", "0.", "False", "", "False"])  # fmt: skip
    assert w is not None
    assert w.bytes == 4 * (3 * 1024 + 512 + 1024)  # q,k,v + mask [2,1,16,16] + out


def test_softmax_layer_norm_rms_norm() -> None:
    s = op_work("aten::softmax", [[1, 64, 512, 512], [], []], [F32, "Scalar", ""])
    assert s is not None and s.flops == 5 * 16_777_216 and s.bytes == 2 * 4 * 16_777_216
    ln = op_work("aten::layer_norm", [[1, 141, 512], [], [512], [512], [], []],
                 [BF16, "ScalarList", BF16, BF16, "Scalar", "Scalar"])  # fmt: skip
    assert ln is not None and ln.flops == 7 * 72_192  # 5 + weight + bias per element
    assert ln.bytes == 2 * (2 * 72_192 + 512 + 512)
    rms = op_work("aten::rms_norm", [[4, 10], [], [10], []], [F32, "ScalarList", F32, "Scalar"])
    assert rms is not None and rms.flops == 5 * 40 and rms.bytes == 4 * (80 + 10)


def test_elementwise_broadcast_and_scalars() -> None:
    w = op_work("aten::mul", [[16, 16, 559, 64], [1, 1, 559, 64]], [BF16, BF16])
    assert w is not None and w.flops == 9_158_656  # 16*16*559*64 outputs
    assert w.bytes == 2 * (9_158_656 + 559 * 64 + 9_158_656)
    s = op_work("aten::add_", [[10, 3], [], []], [F32, "Scalar", "Scalar"])
    assert s is not None and s.flops == 30 and s.bytes == 4 * 60


def test_embedding_moves_rows() -> None:
    w = op_work("aten::embedding", [[30522, 512], [1, 141], [], [], []],
                [BF16, "long int", "Scalar", "Scalar", "Scalar"])  # fmt: skip
    assert w is not None and w.flops == 0 and w.dtype == "bf16"
    assert w.bytes == 141 * 8 + 2 * 141 * 512 * 2  # ids + rows read + output written


def test_conv2d_with_and_without_recorded_stride() -> None:
    dims = [[1, 16, 32, 32], [512, 16, 3, 3], [512], [], [], [], []]
    types = [BF16, BF16, BF16, "ScalarList", "ScalarList", "ScalarList", "Scalar"]
    w = op_work("aten::conv2d", dims, types, ["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "1"])
    assert w is not None
    assert w.flops == 2 * 512 * 32 * 32 * 16 * 9  # 'same'-sized output: 150,994,944
    strided = op_work("aten::conv2d", dims, types, ["", "", "", "[2, 2]", "[0, 0]", "[1, 1]", "1"])
    assert strided is not None and strided.flops == 2 * 512 * 15 * 15 * 16 * 9  # (32-3)//2+1
    assert op_work("aten::conv2d", dims, types, None) is None  # legacy traces: no stride


def test_unknown_op_or_missing_shapes() -> None:
    assert op_work("aten::view", [[2, 3], []], [F32, "ScalarList"]) is None
    assert op_work("aten::mm", None, None) is None


def test_a_masks_call_facts_give_each_rows_length() -> None:
    torch = pytest.importorskip("torch")
    from tracekit.capture.call_facts import call_facts

    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]])
    facts = call_facts(["batch"], ({"attention_mask": mask},), {}, None)
    assert facts["batch.attention_mask.lengths"] == [3, 1, 4]
    assert facts["batch.attention_mask.nonzero"] == 8 and facts["batch.attention_mask.numel"] == 12


@pytest.mark.parametrize(
    ("recorded", "row"),
    [
        ("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM"),
        ("NVIDIA H100 PCIe", "NVIDIA H100 PCIe"),
        ("NVIDIA H200", "NVIDIA H200"),
        ("Tesla V100-SXM2-16GB", "NVIDIA V100"),
        ("NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB"),
        ("NVIDIA B300 SXM6 AC", "NVIDIA B300"),
        ("AMD Instinct MI300X", "AMD Instinct MI300X"),
        ("NVIDIA L4", "NVIDIA L4"),
        ("Tesla T4", "NVIDIA T4"),
        ("NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 4090"),
        ("Quadro GP100", None),
    ],
)
def test_the_recorded_device_name_picks_the_peak_row(
    recorded: str, row: str | None, tmp_path: Path
) -> None:
    found = find_device(recorded, tmp_path)
    assert (found.name if found else None) == row


def test_a_tracekit_toml_device_row_comes_first(tmp_path: Path) -> None:
    (tmp_path / "tracekit.toml").write_text(
        '[[device]]\nname = "lab H100"\nmatch = "H100"\nmemory_gb_s = 3000\nfp32 = 60\nbf16 = 900\n'
    )
    row = find_device("NVIDIA H100 80GB HBM3", tmp_path)
    assert row is not None and row.name == "lab H100" and row.peak_tflops("bf16") == 900
    assert row.peak_tflops("int8") == 60  # no figure of its own: fp32's
    (tmp_path / "tracekit.toml").write_text('[[device]]\nname = "x"\nmatch = "("\n')
    with pytest.raises(ConfigError, match="tracekit.toml: device 'x': bad regular expression"):
        find_device("NVIDIA H100", tmp_path)
    (tmp_path / "tracekit.toml").write_text('[[device]]\nname = "x"\nmatch = "x"\nfp32 = -1\n')
    with pytest.raises(ConfigError, match="must be positive numbers"):
        find_device("x", tmp_path)


def test_verdicts_on_a_known_roof() -> None:
    h100 = find_device("NVIDIA H100 80GB HBM3")
    assert h100 is not None  # bf16 989 TFLOP/s, 3350 GB/s: ridge at 295 FLOP/byte
    # 1 TFLOP in 2 ms (500 TFLOP/s), intensity 1000: compute-bound at 51% of peak
    v, c, m = verdict(1e12, 1e9, 2_000_000, 10, h100, "bf16")
    assert v == "compute-bound" and c == pytest.approx(500 / 989)
    # 1 GB moved in 0.5 ms (2000 GB/s), intensity 0.25: memory-bound
    v, c, m = verdict(2.5e8, 1e9, 500_000, 10, h100, "bf16")
    assert v == "memory-bound" and m == pytest.approx(2000 / 3350)
    # 1 MB in 5 us over 1 kernel: 200 GB/s, 6% of the roof, a 5 us kernel: latency-bound
    v, _, _ = verdict(2.5e5, 1e6, 5_000, 1, h100, "bf16")
    assert v == "latency-bound"
    assert verdict(1.0, 1.0, 1_000, 1, None, "bf16") == ("", None, None)


def test_without_shapes_the_analysis_says_what_enables_it() -> None:
    rows = [{"event_id": 1, "parent_id": None, "stage": None, "request_id": 1,
             "name": "aten::mm", "host_ms": 1.0, "input_dims": None, "input_types": None,
             "concrete_inputs": None, "kernels": 1, "kernel_ns": 1000,
             "top_kernel": "gemm", "top_kernel_ns": 1000, "device": 0}]  # fmt: skip
    a = analyze({"op_kernels": rows})
    assert a["note"] == ENABLE and "record_shapes=True" in a["note"] and not a["ops"]
