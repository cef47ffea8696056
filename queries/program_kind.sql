-- name: program_kind
-- returns: one row: trace_id, kind ('training' | 'inference' | 'other'), kind_evidence, multi_rank, rank_evidence, graph_launches, graph_kernels, kernels, fused_attention_kernels
-- param: $trace_id INTEGER trace to classify
-- default: $trace_id 1
-- What kind of program the trace shows, from the trace alone, so that verdicts and advice fit
-- it. training: a backward pass or an optimizer step (host ops/ranges/frames named *backward*,
-- Optimizer.step, or kernels of a backward pass: *backward*, wgrad, dgrad, bn_bw);
-- inference: framework or engine work without any of those (aten:: ops, nn.Module frames,
-- TensorRT/engine ranges, stages named inference/forward/prefill/decode/generate, or ML
-- kernel families: GEMM, attention, convolution, normalization);
-- other: neither (an HPC or sample program). multi_rank: the trace holds communication
-- kernels (NCCL/RCCL), GPU work on several devices, MPI ranges (MPI_Send, MPI_Init ...), or
-- its store holds traces of several distributed ranks. graph_kernels: kernels replayed by a
-- cudaGraphLaunch/hipGraphLaunch; fused_attention_kernels: kernels of the attention family
-- named by the kernel itself (flash, FMHA, paged, Sage).
WITH host AS (
    SELECT name, kind FROM events
    WHERE trace_id = $trace_id AND kind IN ('cpu_op', 'range', 'python', 'gpu_range')
), backward AS (
    SELECT min(name) AS name, count(*) AS n FROM host
    WHERE name ILIKE '%backward%' OR name ILIKE 'Optimizer.step%' OR name ILIKE '%optimizer.step%'
), bw_kernels AS (
    SELECT min(name) AS name, count(*) AS n FROM events
    WHERE trace_id = $trace_id AND kind = 'kernel'
      AND regexp_matches(name, '(?i)backward|wgrad|dgrad|bn_bw|_bwd_')
), framework AS (
    SELECT count(*) AS n FROM host
    WHERE name LIKE 'aten::%' OR name LIKE 'nn.Module:%' OR name ILIKE '%enqueue%'
), served AS (  -- stages that name inference work (annotated, by rule or by a structure)
    SELECT count(*) AS n FROM stages
    WHERE trace_id = $trace_id
      AND regexp_matches(lower(stage), '^(inference|forward|prefill|decode|generate|generation)$')
), act AS (
    SELECT category, count(*) AS n FROM tk_gpu_activity($trace_id) WHERE kind = 'kernel'
    GROUP BY category
), graph AS (
    SELECT count(DISTINCT r.event_id) AS launches, count(k.event_id) AS kernels
    FROM events r LEFT JOIN events k
      ON k.trace_id = r.trace_id AND k.launch_id = r.event_id AND k.kind = 'kernel'
    WHERE r.trace_id = $trace_id AND r.kind = 'runtime' AND r.name ILIKE '%GraphLaunch%'
), fused AS (
    SELECT count(*) AS n FROM events
    WHERE trace_id = $trace_id AND kind = 'kernel'
      AND regexp_matches(tk_kernel_signature(name),
                         '(?i)^(pytorch_)?flash|^\w*fmha|^\w*paged_attention|^sage_fwd|^\w*flash_(fwd|bwd)|^([a-z0-9_]+::)*(flash_fwd|fmha|mha_fwd)')
), ranks AS (  -- ranks the traces say they are (an nsys and a Kineto view of one run, or a
    -- before/after pair, are several traces but not several ranks)
    SELECT count(DISTINCT rank) AS n FROM traces WHERE rank IS NOT NULL
), mpi AS (
    SELECT count(*) AS n FROM host WHERE regexp_matches(name, '^(MPI:)?MPI_(Send|Recv|Isend|Irecv|Allreduce|Bcast|Init)')
), gpus AS (
    SELECT count(DISTINCT device) AS n FROM events
    WHERE trace_id = $trace_id AND kind IN ('kernel', 'memcpy', 'memset')
)
SELECT $trace_id::INTEGER AS trace_id,
       CASE WHEN b.n > 0 OR bk.n > 0 THEN 'training'
            WHEN f.n > 0 OR sv.n > 0 OR coalesce((SELECT sum(n) FROM act
                                      WHERE category IN ('GEMM', 'attention', 'convolution',
                                                         'normalization')), 0) > 0
                THEN 'inference'
            ELSE 'other' END AS kind,
       CASE WHEN b.n > 0 THEN b.n || ' backward/optimizer host events (e.g. ' || b.name || ')'
            WHEN bk.n > 0 THEN bk.n || ' backward kernels (e.g. ' || left(bk.name, 60) || ')'
            WHEN f.n > 0 THEN f.n || ' framework/engine ops, no backward pass or optimizer step'
            WHEN sv.n > 0 THEN sv.n || ' inference stage ranges, no backward pass or optimizer step'
            ELSE 'no framework ops and no backward pass' END AS kind_evidence,
       coalesce((SELECT n FROM act WHERE category = 'communication'), 0) > 0
           OR (SELECT n FROM ranks) > 1 OR (SELECT n FROM gpus) > 1 OR (SELECT n FROM mpi) > 0
           AS multi_rank,
       CASE WHEN coalesce((SELECT n FROM act WHERE category = 'communication'), 0) > 0
                THEN (SELECT n FROM act WHERE category = 'communication')
                     || ' communication kernels (NCCL/RCCL)'
            WHEN (SELECT n FROM ranks) > 1 THEN (SELECT n FROM ranks) || ' rank traces'
            WHEN (SELECT n FROM gpus) > 1 THEN 'GPU work on ' || (SELECT n FROM gpus) || ' devices'
            WHEN (SELECT n FROM mpi) > 0 THEN (SELECT n FROM mpi) || ' MPI ranges'
            ELSE 'no communication kernels' END AS rank_evidence,
       g.launches AS graph_launches, g.kernels AS graph_kernels,
       coalesce((SELECT sum(n) FROM act), 0)::BIGINT AS kernels,
       fu.n AS fused_attention_kernels
FROM backward b, bw_kernels bk, framework f, served sv, graph g, fused fu
ORDER BY trace_id;
