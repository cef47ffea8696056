"""The DuckDB store: one cached store per trace, built atomically, reused while unchanged.

The store layer is this package: build.py builds and checks one trace's store; traceset.py
opens one or many as a `TraceSet` (tracekit.open); parallel.py builds several at once;
derive.py (+ derive.sql, schema.sql) turns ingested rows into nesting, launches, stages,
requests; stages.py and attributes.py hold stage rules and call-hook facts; cache.py the
cache folder; lake.py a Parquet export as a store.

A trace's store is cached in tracekit's cache directory (`tracekit.store.cache`), never
beside the trace. It is keyed on the source's identity (path, inode, size, mtime, ctime), the schema
version and the stage rules; it is written to a temporary name and renamed, under a file lock
on the source, so a crash or a concurrent ingest never leaves a half-written store.
"""

# Nothing is imported here: `import tracekit` (and `tracekit --help`) reach this package for
# stages.py, and must not import DuckDB.
