-- name: compare_stage_samples
-- returns: one row per (trace_id, request_id, stage): trace_id, request_id, stage, dur_ns
-- The per-request samples behind compare_stage_stats (tracekit diff bootstraps over them),
-- from tk_stage_samples (tracekit/macros.sql): a stage's time in a request is the sum of its
-- ranges' durations there; `end_to_end` is the request's duration; `unattributed` is the
-- request minus the union of its stage ranges (clipped to the request). Stages outside every
-- request, and 'window' requests (a trace's whole span, not a unit of work), are left out.
SELECT * FROM tk_stage_samples()
ORDER BY trace_id, request_id, stage;
