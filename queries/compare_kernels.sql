-- name: compare_kernels
-- returns: one row per kernel name: name, count, total_ms, rank
-- GPU kernels over every trace in the store, by total time (rank 1 = most time), for
-- tracekit diff and `tracekit check --no-new-top-kernels`.
SELECT name,
       count(*) AS count,
       sum(dur_ns) / 1e6 AS total_ms,
       row_number() OVER (ORDER BY sum(dur_ns) DESC, name) AS rank
FROM events
WHERE kind = 'kernel'
GROUP BY name
ORDER BY rank;
