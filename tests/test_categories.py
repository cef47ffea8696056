"""GPU activity categories (tracekit/categories.toml) held to an independent classification.

Every kernel of every shared trace gets the category that tests/kernel_families.py (written
apart from the toml, in plain Python) expects for its name and launching op (graph-replayed
kernels: their name alone), and "other" stays under 10% of each trace's GPU time.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
from conftest import SHARED_TRACES, shared_params
from kernel_families import expected_category

import tracekit
from tracekit.categories import install
from tracekit.store.build import create_schema

# The one shared trace whose kernels name no family: the CUDA concurrency sample's own
# test0..test4 (and test), which are "other" by any reading of their names.
OTHER_IS_RIGHT = {"nsys_2022_gtx1060_concurrent_nvtx.sqlite"}

_KERNELS = """
SELECT a.name, a.op, a.category, sum(a.dur_ns)::BIGINT AS ns, count(*) AS n,
       bool_or(r.name ILIKE '%GraphLaunch%') AS graph_replayed
FROM tk_gpu_activity($tid) a
JOIN events e ON e.trace_id = a.trace_id AND e.event_id = a.event_id
LEFT JOIN events r ON r.trace_id = e.trace_id AND r.event_id = e.launch_id
WHERE a.kind = 'kernel'
GROUP BY a.name, a.op, a.category
ORDER BY ns DESC, a.name, a.op
"""


def _shared_inputs() -> list[object]:
    folders = [
        pytest.param(p, id=p.name)
        for p in (sorted(SHARED_TRACES.iterdir()) if SHARED_TRACES.is_dir() else [])
        if p.is_dir()
    ]
    return shared_params("*.sqlite") + shared_params("*.json.gz") + folders


@pytest.mark.parametrize("trace", _shared_inputs())
def test_every_kernel_of_a_shared_trace_has_its_expected_category(
    trace: Path,
) -> None:
    with tracekit.open(trace) as ts:  # read only: its store is built once per run
        tids = [r["trace_id"] for r in ts.sql("SELECT trace_id FROM traces ORDER BY 1").to_dicts()]
        for tid in tids:
            rows = ts.sql(_KERNELS.replace("$tid", str(int(tid)))).to_dicts()
            total = ts.sql(
                f"SELECT coalesce(sum(dur_ns), 0)::BIGINT AS s FROM tk_gpu_activity({int(tid)})"
            ).to_dicts()[0]["s"]
            wrong = [
                (r["name"][:120], r["op"], r["category"], want)
                for r in rows
                if r["category"]
                != (want := expected_category(r["name"], None if r["graph_replayed"] else r["op"]))
            ]
            assert not wrong, f"{trace.name} trace {tid}: {wrong[:10]}"
            other = sum(r["ns"] for r in rows if r["category"] == "other")
            if total and trace.name not in OTHER_IS_RIGHT:
                assert other < 0.10 * total, f"{trace.name}: other {other / total:.1%}"


# Kernels of the field (some outside the shared traces) whose category a substring rule got
# wrong or missed: (name, launching op, category).
CASES = [
    # '_typeConvert' holds "conv": normalization, not convolution
    ("void vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, "
     "vllm::_typeConvert<c10::BFloat16>::packed_hip_type*, int)", None, "normalization"),
    ("bmm_MxE4m3_MxE2m1MxE4m3_Fp32_t128x8x256u2_s3_et128x8_m128x8x64_cga1x1x1_16dp256b_rM_"
     "TN_transOut_schPd2x1x2x3_biasM_bN_ldgsts_ldgstsSf_rgTma_clmp_swiGlu_dynB_sm100f", None,
     "GEMM"),
    ("bmm_Bfloat16_Bfloat16Bfloat16_Fp32_t128x8x128u2_s6_et128x8_m128x8x16_c1x1x1_16dp256b_rM"
     "_BN_transOut_schPd2x1x2x3_bN_ldgsts_ldgstsSf_rgTma_clmp_swiGlu_dynB_sm100f", None, "GEMM"),
    ("nvjet_sm103_tst_32x64_64x16_4x1_v_bz_splitK_TNN", None, "GEMM"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_"
     "segment_k_off_kernel__5x_cublas", None, "GEMM"),
    ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_128x64_64x6_tn_align8>"
     "(cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_128x64_64x6_tn_align8::Params)", None,
     "GEMM"),
    ("Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT128x192x64_MI16x16x1_SN_LDSB1", None, "GEMM"),
    ("void ck::kernel_moe_gemm<ck::GridwiseMoeGemm<ck::tensor_layout::gemm::RowMajor>>()", None,
     "GEMM"),
    ("triton_poi_fused_addmm_gelu_view_26", None, "elementwise/reduction"),
    ("void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
     "cutlass::bfloat16_t>, true>(Flash_fwd_params)", None, "attention"),
    ("fmhaSm100fKernel_QkvBfloat16OBfloat16H128PagedKvCausalP32VarSeqQ8Kv128PersistentSwapsAb"
     "ForGen", None, "attention"),
    ("void paged_attention_ll4mi_QKV_mfma16_kernel<0, __hip_bfloat16>(int)", None, "attention"),
    ("sage_fwd", None, "attention"),
    ("kernel_cutlass_kernel_flashinfernormkernelsrmsnormRMSNormKernel_object_at__tensorptrbf16",
     None, "normalization"),
    ("create_flashinfer_kv_indices_triton", None, "elementwise/reduction"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, "
     "at::native::NormTwoOps<float, float, float>, unsigned int, float, 4> >(int)", None,
     "elementwise/reduction"),
    ("void at::native::(anonymous namespace)::distribution_elementwise_grid_stride_kernel<float, 4,"
     " at::native::templates::cuda::normal_and_transform<float>>(int)", None,
     "elementwise/reduction"),
    ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", None, "communication"),
    ("trt_maxwell_scudnn_winograd_128x128_ldg1_ldg4_mobile_relu_tile148t_nt_v0", None,
     "convolution"),
    ("std::enable_if<!(false), void>::type internal::gemvx::kernel<int, int, float>(int)", None,
     "GEMM"),
    # the launching op breaks the tie for a generic kernel; a graph replay keeps the name's
    ("volta_sgemm_128x64_nn", "aten::bmm", "attention"),
    ("volta_sgemm_128x64_nn", "aten::cudnn_convolution", "convolution"),
    ("volta_sgemm_128x64_nn", "aten::linear", "GEMM"),
    ("void flash::flash_fwd_kernel<T>(Flash_fwd_params)", "aten::linear", "attention"),
    ("my_own_kernel(float*)", None, "other"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "op", "category"), CASES, ids=[c[0][:40] for c in CASES])
def test_field_kernels_get_their_family(name: str, op: str | None, category: str) -> None:
    assert expected_category(name, op) == category  # the independent reading agrees
    con = duckdb.connect()
    create_schema(con)
    install(con)
    con.execute(
        "INSERT INTO events (trace_id, event_id, kind, name, start_ns, end_ns, dur_ns, launch_id,"
        " launch_op) VALUES (1, 1, 'runtime', 'cudaLaunchKernel', 0, 1, 1, NULL, NULL),"
        " (1, 2, 'kernel', ?, 5, 9, 4, 1, ?)",
        [name, op],
    )
    row = con.execute("SELECT category FROM tk_gpu_activity(1)").fetchone()
    assert row is not None and row[0] == category


def test_a_graph_replayed_kernel_is_classified_by_its_name() -> None:
    """A GEMM replayed by cudaGraphLaunch under an attention op stays GEMM; eager, attention."""
    con = duckdb.connect()
    create_schema(con)
    install(con)
    con.execute(
        "INSERT INTO events (trace_id, event_id, kind, name, start_ns, end_ns, dur_ns, launch_id,"
        " launch_op) VALUES"
        " (1, 1, 'runtime', 'cudaGraphLaunch', 0, 1, 1, NULL, NULL),"
        " (1, 2, 'runtime', 'cudaLaunchKernel', 0, 1, 1, NULL, NULL),"
        " (1, 3, 'kernel', 'nvjet_tst_64x8_64x16_4x1_v_bz_TNN', 5, 9, 4, 1, 'aten::bmm'),"
        " (1, 4, 'kernel', 'nvjet_tst_64x8_64x16_4x1_v_bz_TNN', 9, 12, 3, 2, 'aten::bmm')"
    )
    got = con.execute("SELECT event_id, category FROM tk_gpu_activity(1) ORDER BY 1").fetchall()
    assert got == [(3, "GEMM"), (4, "attention")]


def test_constant_pattern_rules_match_as_the_table_rows_do() -> None:
    """tk_rule_matches, redefined by install with each rule's pattern as a constant, answers
    what regexp_matches answers on the tk_category_rules row: for every rule and name here,
    patterns with quotes, backslashes and case folding included."""
    from tracekit.categories import CategoryRule, builtin_rules

    odd = [
        CategoryRule("quoted", "kernel", r"^it's_\d+"),
        CategoryRule("folded", "op", r"(?-i:^Exact)|\bMIXED\b"),
    ]
    con = duckdb.connect()
    create_schema(con)
    install(con, odd + list(builtin_rules()))
    names = [
        "it's_42", "IT'S_7", "Exact", "exact", "a mixed one", "ncclDevKernel_SendRecv(x)",
        "void at::native::vectorized_layer_norm_kernel<float>(int)", "aten::bmm", "",
    ]  # fmt: skip
    con.execute("CREATE TABLE names AS SELECT unnest(?::VARCHAR[]) AS text", [names])
    got = con.execute(
        "SELECT text, priority, tk_rule_matches(text, priority, pattern) AS hit,"
        " regexp_matches(text, pattern, 'i') AS want FROM names, tk_category_rules"
    ).fetchall()
    assert len(got) == len(names) * (len(odd) + len(builtin_rules()))
    (body,) = con.execute(
        "SELECT macro_definition FROM duckdb_functions() WHERE function_name = 'tk_rule_matches'"
    ).fetchone() or (None,)
    assert "'^it''s_\\d+'" in body  # the constant form is what answered
    assert [r for r in got if r[2] != r[3]] == []
    odd_hits = {r[0] for r in got if r[1] < len(odd) and r[2]}
    assert odd_hits == {"it's_42", "IT'S_7", "Exact", "a mixed one"}
