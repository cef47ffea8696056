-- name: op_kernels
-- returns: one row per host op (cpu_op) with recorded input shapes or with kernels it launched itself: trace_id, event_id, parent_id (enclosing host event), stage, request_id, name, host_ms, input_dims, input_types, concrete_inputs (JSON text, as torch.profiler recorded them), kernels, kernel_ns (summed durations of the kernels it launched directly), top_kernel (its longest kernel in total), top_kernel_ns, device
-- param: $trace_id INTEGER trace to read
-- default: $trace_id 1
-- The raw material of the roofline (tracekit/roofline.py): each op's shapes, and the GPU time of
-- the kernels whose launching runtime call it directly encloses (launch_id -> runtime call ->
-- parent_id), or that carry its External id when that chain ends elsewhere (Kineto). An op's kernels
-- under nested ops (aten::linear -> aten::addmm -> gemm) are added up the parent_id chain by the
-- caller. Shapes need torch.profiler's record_shapes=True (tracekit capture turns it on); nsys
-- traces have no cpu_op rows.
WITH ops AS (
    SELECT event_id, parent_id, stage, request_id, name, dur_ns, external_id,
           args -> 'Input Dims' AS input_dims, args -> 'Input type' AS input_types,
           args -> 'Concrete Inputs' AS concrete_inputs
    FROM events WHERE trace_id = $trace_id AND kind = 'cpu_op'
), k AS (
    SELECT k.event_id, k.name, k.dur_ns, k.device, k.external_id, r.parent_id AS launch_parent
    FROM events k LEFT JOIN events r
      ON r.trace_id = k.trace_id AND r.kind = 'runtime' AND r.event_id = k.launch_id
    WHERE k.trace_id = $trace_id AND k.kind = 'kernel'
), ext AS (  -- External id -> its first cpu_op (for kernels without a runtime parent)
    SELECT external_id, min(event_id) AS op_id FROM ops
    WHERE external_id IS NOT NULL AND external_id <> 0 GROUP BY external_id
), owned AS (
    SELECT coalesce(o.event_id, x.op_id) AS op_id, k.name, k.dur_ns, k.device
    FROM k
    LEFT JOIN ops o ON o.event_id = k.launch_parent
    LEFT JOIN ext x ON x.external_id = k.external_id  -- (an IS NULL test here: a 4x slower join)
), by_name AS (
    SELECT op_id, name, sum(dur_ns) AS ns, count(*) AS n, min(device) AS device
    FROM owned WHERE op_id IS NOT NULL GROUP BY op_id, name
), per_op AS (
    SELECT op_id, sum(n) AS kernels, sum(ns) AS kernel_ns, min(device) AS device,
           max(ns) AS top_kernel_ns
    FROM by_name GROUP BY op_id
), top AS (
    SELECT b.op_id, min(b.name) AS top_kernel
    FROM by_name b JOIN per_op p ON p.op_id = b.op_id AND b.ns = p.top_kernel_ns
    GROUP BY b.op_id
)
SELECT $trace_id::INTEGER AS trace_id, o.event_id, o.parent_id, o.stage, o.request_id, o.name,
       o.dur_ns / 1e6 AS host_ms,
       CAST(o.input_dims AS VARCHAR) AS input_dims, CAST(o.input_types AS VARCHAR) AS input_types,
       CAST(o.concrete_inputs AS VARCHAR) AS concrete_inputs,
       coalesce(p.kernels, 0)::BIGINT AS kernels, coalesce(p.kernel_ns, 0)::BIGINT AS kernel_ns,
       t.top_kernel, p.top_kernel_ns::BIGINT AS top_kernel_ns, p.device
FROM ops o
LEFT JOIN per_op p ON p.op_id = o.event_id
LEFT JOIN top t ON t.op_id = o.event_id
WHERE o.input_dims IS NOT NULL OR p.op_id IS NOT NULL
ORDER BY o.event_id;
