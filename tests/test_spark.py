"""The query catalogue on a Parquet export: DuckDB over the folder, and Spark local mode,
against DuckDB over the traces themselves (docs/export.md).

The export is built from real traces of ../shared/traces (two Kineto, two nsys) plus a
synthetic Kineto trace with requests and stages (bench/gen_kineto.py). Spark tests need the
spark extra (pyspark, sqlglot) and a Java runtime; they skip with the reason otherwise. One
Spark session (local[2], SPARK_TEST_CONF) serves the whole module.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import math
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import tracekit
from tests.conftest import REPO, SHARED_TRACES
from tracekit.cli import main
from tracekit.export import export_parquet
from tracekit.sql import all_queries

REAL = (
    "kineto_a100_ddp_nccl_gpu_user_annotation_hta.json.gz",
    "kineto_h100_bert_small_inference_tracelens.json.gz",
    "nsys_2022.4_cpu_nvtx_osrt_example.sqlite",
    "nsys_2022_gtx1060_concurrent_nvtx.sqlite",
)
REL_TOL = 1e-9  # floats: the engines sum and divide in different orders
ABS_TOL = 1e-9


def _gen_kineto() -> Any:
    spec = importlib.util.spec_from_file_location("gen_kineto", REPO / "bench" / "gen_kineto.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gen_kineto", mod)
    spec.loader.exec_module(mod)
    return mod


def make_ranks(folder: Path, real: tuple[str, ...] = REAL, synthetic: int = 1) -> Path:
    """Copies of real traces plus `synthetic` generated ranks in one folder."""
    if not SHARED_TRACES.is_dir():
        pytest.skip(f"{SHARED_TRACES} is absent")
    folder.mkdir(parents=True, exist_ok=True)
    for name in real:
        shutil.copyfile(SHARED_TRACES / name, folder / name)
    gen = _gen_kineto()
    for r in range(synthetic):
        with open(folder / f"synth_rank{r}.json", "w") as f:
            gen.generate(f, 4000, seed=r, rank=r, world=synthetic)
    return folder


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(folder of traces, its Parquet export)."""
    root = tmp_path_factory.mktemp("lake")
    ranks = make_ranks(root / "ranks")
    export_parquet([ranks], root / "pq")
    return ranks, root / "pq"


def runs(lake: tuple[Path, Path]) -> list[tuple[str, dict[str, int]]]:
    """Every named query once per trace it takes (defaults for the other parameters)."""
    with tracekit.open(lake[0]) as t:
        ids = t.sql("SELECT trace_id FROM traces ORDER BY 1")["trace_id"].to_list()
    out: list[tuple[str, dict[str, int]]] = []
    for name, q in all_queries().items():
        if any(p.name == "trace_id" for p in q.params):
            out.extend((name, {"trace_id": i}) for i in ids)
        else:
            out.append((name, {}))
    return out


@pytest.fixture(scope="module")
def duckdb_rows(lake: tuple[Path, Path]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """DuckDB's rows over the traces for every run of `runs` (the oracle of the tests below),
    keyed by (name, params as JSON)."""
    with tracekit.open(lake[0]) as t:
        return {
            (name, json.dumps(params)): t.query(name, **params).to_dicts()
            for name, params in runs(lake)
        }


@pytest.fixture(scope="module")
def richest(
    duckdb_rows: dict[tuple[str, str], list[dict[str, Any]]],
) -> dict[str, tuple[dict[str, int], list[dict[str, Any]]]]:
    """Each named query's run with the most rows on DuckDB (ties: the first): its params and
    rows."""
    out: dict[str, tuple[dict[str, int], list[dict[str, Any]]]] = {}
    for (name, params), rows in duckdb_rows.items():
        if name not in out or len(rows) > len(out[name][1]):
            out[name] = (json.loads(params), rows)
    assert len(out) == len(all_queries())
    return out


# --- comparing results ------------------------------------------------------------------


def _canon(v: Any) -> Any:
    """A value as compared: JSON object text parsed, floats kept for the tolerance."""
    if isinstance(v, str) and v.startswith("{") and v.endswith("}"):
        try:
            return json.loads(v)
        except ValueError:
            return v
    return v


def same_value(a: Any, b: Any) -> bool:
    a, b = _canon(a), _canon(b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    if isinstance(a, bool) or isinstance(b, bool):
        return a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        if isinstance(a, int) and isinstance(b, int):
            return a == b  # counts and integer sums: exact
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=ABS_TOL)
    return bool(a == b)


def assert_same_rows(want: list[dict[str, Any]], got: list[dict[str, Any]], what: str) -> None:
    assert len(got) == len(want), f"{what}: {len(got)} rows, want {len(want)}"
    for i, (w, g) in enumerate(zip(want, got, strict=True)):
        assert list(g) == list(w), f"{what}: columns {list(g)} != {list(w)}"
        bad = {k: (w[k], g[k]) for k in w if not same_value(w[k], g[k])}
        assert not bad, f"{what}: row {i} differs (want, got): {bad}"


# --- DuckDB over the export folder (no Spark needed) --------------------------------------


def test_duckdb_reads_an_export_folder_like_the_traces(
    lake: tuple[Path, Path], duckdb_rows: dict[tuple[str, str], list[dict[str, Any]]]
) -> None:
    with tracekit.open(lake[1]) as export:
        for (name, params), want in duckdb_rows.items():
            got = export.query(name, **json.loads(params)).to_dicts()
            assert_same_rows(want, got, f"{name} {params}")


def test_cli_sql_and_query_take_an_export_folder(lake: tuple[Path, Path]) -> None:
    _, pq = lake
    r = CliRunner().invoke(
        main, ["sql", str(pq), "SELECT count(*) AS n FROM traces", "--format", "csv"]
    )
    assert r.exit_code == 0, r.output
    assert r.output == "n\n5\n"
    r = CliRunner().invoke(main, ["query", "rank_summary", str(pq), "--format", "json"])
    assert r.exit_code == 0, r.output
    assert {row["trace_id"] for row in json.loads(r.output)} == {1, 2, 3, 4, 5}


def test_two_export_folders_are_numbered_in_input_order(tmp_path: Path) -> None:
    ranks = make_ranks(tmp_path / "ranks", real=REAL[1:2], synthetic=1)
    export_parquet([ranks], tmp_path / "a")
    export_parquet([ranks / "synth_rank0.json"], tmp_path / "b")
    with tracekit.open([tmp_path / "a", tmp_path / "b"]) as t:
        got = t.sql("SELECT trace_id, path FROM traces ORDER BY 1").rows()
    assert [(i, Path(p).name) for i, p in got] == [
        (1, REAL[1]),
        (2, "synth_rank0.json"),
        (3, "synth_rank0.json"),
    ]


def test_engine_spark_refuses_what_is_not_an_export(tmp_path: Path) -> None:
    """Without pyspark/Java the message says what is missing; with them, what Spark reads."""
    trace = make_ranks(tmp_path / "ranks", real=(), synthetic=1) / "synth_rank0.json"
    r = CliRunner().invoke(main, ["sql", str(trace), "SELECT 1", "--engine", "spark"])
    assert r.exit_code == 2
    assert r.output.count("\n") == 1 and r.output.startswith("Error: ")
    assert "not a Parquet export folder" in r.output or "--engine spark:" in r.output


def test_engine_spark_refuses_an_older_export_in_one_line(
    lake: tuple[Path, Path], tmp_path: Path
) -> None:
    """An export from before gpu_islands gets the line DuckDB gives it, not Spark's missing
    path (or, lacking a column, a query failing halfway)."""
    old = tmp_path / "old"
    shutil.copytree(lake[1], old)
    shutil.rmtree(old / "gpu_islands")
    r = CliRunner().invoke(main, ["query", "gpu_devices", str(old), "--engine", "spark"])
    assert r.exit_code == 2
    assert r.output.count("\n") == 1 and r.output.startswith("Error: ")
    assert (
        r.output.strip()
        in (
            f"Error: {old}: an older tracekit wrote it (no gpu_islands table); ingest or export "
            "the trace again",
        )
        or "--engine spark:" in r.output
    )  # (without pyspark or Java: what is missing)


# --- the transpiler (sqlglot only) ------------------------------------------------------


def test_every_catalogue_query_transpiles_to_spark_sql() -> None:
    pytest.importorskip("sqlglot", reason="the spark extra (sqlglot) is not installed")
    from tracekit.spark_sql import to_spark

    for name, q in all_queries().items():
        text = to_spark(q.text).upper()
        for duckdb_only in ("ASOF", "MATERIALIZED", "INT128", "HUGEINT", "QUANTILE_CONT"):
            assert duckdb_only not in text, f"{name}: {duckdb_only} left in the Spark SQL"
        assert not re.search(r"\bTK_\w+\(|QUERY_TABLE", text), f"{name}: a macro call left"
        assert not re.search(r"\$[A-Z_]", text), f"{name}: a $parameter left in the Spark SQL"
        for p in q.params:
            assert f":{p.name.upper()}" in text, f"{name}: ${p.name} is not a Spark parameter"


@functools.cache  # a query runs once per trace; sqlglot takes ~40 ms a text
def _expanded_duckdb(sql: str) -> str:
    """DuckDB SQL with tracekit's macro calls expanded (spark_sql's expansion, DuckDB's writer)."""
    import sqlglot

    from tracekit.spark_sql import expand_macros

    return ";\n".join(
        expand_macros(tree).sql(dialect="duckdb")
        for tree in sqlglot.parse(sql, read="duckdb")
        if tree is not None
    )


def test_expanded_macros_give_the_macros_rows_on_duckdb(
    lake: tuple[Path, Path],
    richest: dict[str, tuple[dict[str, int], list[dict[str, Any]]]],
) -> None:
    """The expansion Spark runs, checked apart from Spark: every named query with its macro
    calls expanded (and nothing else changed) returns on DuckDB the rows the macros return,
    on the trace where it has the most rows (the trace Spark's test compares it on)."""
    pytest.importorskip("sqlglot", reason="the spark extra (sqlglot) is not installed")
    from tracekit.spark_sql import macros
    from tracekit.sql import run_named_query

    calling = 0
    with tracekit.open(lake[0]) as t:
        for name, (params, want) in richest.items():
            text = all_queries()[name].text
            expanded = _expanded_duckdb(text)
            if not any(re.search(rf"\b{m}\s*\(", text) for m in macros()):
                continue
            calling += 1
            assert not re.search(r"\btk_(?!category_rules\b)\w+\s*\(|query_table", expanded), name
            got = run_named_query(
                lambda sql, p: t.sql(_expanded_duckdb(sql), p), name, params
            ).to_dicts()
            assert_same_rows(want, got, f"{name} {params} expanded")
    assert calling >= 20  # 21 of the 47: the GPU, stage, request and compare queries


def test_macro_expansion_shapes() -> None:
    """Scalar macros nest (tk_kernel_name calls three others), arguments keep their
    precedence, a table macro keeps its alias, and a misuse is a QueryError."""
    pytest.importorskip("sqlglot", reason="the spark extra (sqlglot) is not installed")
    import duckdb

    from tracekit.errors import QueryError
    from tracekit.spark_sql import to_spark

    con = duckdb.connect()  # no macros on it: the expanded text must stand alone
    sql = (
        "SELECT tk_op_name('aten::mm' || ', seq = 4, op_id = 7') AS op, "
        "tk_kernel_name('void at::native::vectorized_elementwise_kernel<4, float>(int)') AS k, "
        "tk_copy_direction('memcpy', 'Memcpy DtoH (Device -> Pinned)', NULL) AS d"
    )
    assert con.execute(_expanded_duckdb(sql)).fetchall() == [
        ("aten::mm", "vectorized_elementwise_kernel<…>", "DtoH")
    ]
    spark = to_spark(
        "WITH iv AS (SELECT 1 AS key, 0 AS start_ns, 5 AS end_ns) "
        "SELECT u.union_ns FROM tk_union_ns('iv') u JOIN tk_union_ns('iv') v USING (key)"
    )
    assert "tk_union_ns_1__o" in spark and "tk_union_ns_2__o" in spark  # one WITH, no clash
    assert ") AS u" in spark and ") AS v" in spark
    with pytest.raises(QueryError, match="name of a table or CTE"):
        to_spark("SELECT * FROM tk_union_ns(iv)")
    with pytest.raises(QueryError, match="takes 1 argument"):
        to_spark("SELECT tk_op_name(a, b) FROM t")
    with pytest.raises(QueryError, match="table macro"):
        to_spark("SELECT tk_islands('iv')")


def test_query_show_engine_spark_prints_spark_sql() -> None:
    pytest.importorskip("sqlglot", reason="the spark extra (sqlglot) is not installed")
    r = CliRunner().invoke(main, ["query", "stage_summary", "--show", "--engine", "spark"])
    assert r.exit_code == 0, r.output
    assert "PERCENTILE(" in r.output and ":trace_id" in r.output


# --- Spark local mode -------------------------------------------------------------------


# The CLI's session settings, on 2 cores, but set to spend less on compiling than on running
# these tables of a few MB: one partition a shuffle; expressions interpreted, not compiled
# (whole-stage codegen and generated projections off); no adaptive re-planning between
# stages; a JVM whose JIT stops at its quick tier and collects garbage on one thread, with the
# code cache that tier gets without the full JIT (48 MB) raised to 256 MB: Spark fills 48 MB
# halfway through the catalogue, and the JVM then stops compiling ("CodeCache is full"). What
# the tests compare is the rows of the catalogue's SQL, which Spark's execution modes must
# not change. The 47 catalogue queries on a fresh session: 80 -> 63 s, and the JVM's CPU
# 148 -> 78 s (it shares 2 cores with the suite's other worker); the larger code cache then
# 68 -> 60 s, JVM CPU 86 -> 72 s. No broadcast joins (each broadcast is a job of its own:
# 12-60 of them a query) but shuffled hash joins: the catalogue's machine CPU 97 -> 88 s.
SPARK_TEST_CONF = {
    "spark.sql.shuffle.partitions": "1",
    "spark.sql.autoBroadcastJoinThreshold": "-1",
    "spark.sql.join.preferSortMergeJoin": "false",
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    "spark.sql.adaptive.enabled": "false",
}
SPARK_TEST_JVM = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=256m -XX:+UseSerialGC"


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from tracekit.spark import spark_available

    why = spark_available()
    if why:
        pytest.skip(f"Spark cannot run here: {why}")
    from tracekit.spark import local_session

    session = local_session("local[2]", conf=SPARK_TEST_CONF, java_options=SPARK_TEST_JVM)
    yield session
    session.stop()


@pytest.mark.slow
def test_every_catalogue_query_on_spark_matches_duckdb(
    spark: Any,
    lake: tuple[Path, Path],
    richest: dict[str, tuple[dict[str, int], list[dict[str, Any]]]],
) -> None:
    """Every named query: the same rows on Spark over the export as on DuckDB over the
    traces, on the trace where DuckDB gives it the most rows (ties: the first), so each
    query's translation is compared on its fullest result. (Every query on every trace was
    ~200 Spark jobs, 8 of the suite's minutes; DuckDB over the same export is held to every
    trace by test_duckdb_reads_an_export_folder_like_the_traces.) Percentiles are Spark's
    exact `percentile` (the same linear interpolation as quantile_cont), so they too match
    within float tolerance."""
    from tracekit.spark import open_spark

    with open_spark([lake[1]], spark=spark) as sp:
        for name, (params, want) in richest.items():
            got = sp.query(name, **params).to_dicts()
            assert_same_rows(want, got, f"{name} {params}")


@pytest.mark.slow
def test_category_rules_of_a_tracekit_toml_reach_spark(
    spark: Any, lake: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tk_category_rules on Spark holds the rules DuckDB's connection gets: a tracekit.toml's
    [[category]] tables first (here one that takes elementwise kernels), then the built-in."""
    from tracekit.spark import open_spark

    (tmp_path / "tracekit.toml").write_text('[[category]]\nname = "mine"\nkernel = "elementwise"\n')
    monkeypatch.chdir(tmp_path)
    ranks, pq = lake
    with tracekit.open(ranks) as duck, open_spark([pq], spark=spark) as sp:
        rules = sp.sql("SELECT * FROM tk_category_rules ORDER BY priority").to_dicts()
        assert rules == duck.sql("SELECT * FROM tk_category_rules ORDER BY priority").to_dicts()
        assert rules[0] == {
            "priority": 0, "category": "mine", "target": "kernel", "pattern": "elementwise"
        }  # fmt: skip
        want = duck.query("gpu_categories", trace_id=2).to_dicts()
        got = sp.query("gpu_categories", trace_id=2).to_dicts()
    assert "mine" in {r["category"] for r in want}
    assert_same_rows(want, got, "gpu_categories with a tracekit.toml")


@pytest.mark.slow
def test_approximate_percentiles_stay_within_their_rank_bound(
    spark: Any, lake: tuple[Path, Path]
) -> None:
    """percentile_approx(x, q, 10000) returns a value of the group whose rank is within
    n / 10000 of q * n: for these groups (< 10000 values) one of the two values quantile_cont
    interpolates between, or the exact quantile_disc value."""
    from tracekit.spark import open_spark

    ranks, pq = lake
    sql = (
        "SELECT trace_id, stage, quantile_cont(dur_ns, 0.5) AS p50, "
        "quantile_cont(dur_ns, 0.99) AS p99 FROM stages GROUP BY ALL ORDER BY ALL"
    )
    with tracekit.open(ranks) as duck, open_spark([pq], spark=spark, approx_percentiles=True) as sp:
        samples = duck.sql("SELECT trace_id, stage, dur_ns FROM stages").rows()
        got = sp.sql(sql).rows()
    assert got
    for trace_id, stage, *approx in got:
        values = sorted(d for t, s, d in samples if (t, s) == (trace_id, stage))
        for q, v in zip((0.5, 0.99), approx, strict=True):
            pos = q * (len(values) - 1)
            allowed = {values[math.floor(pos)], values[math.ceil(pos)]}
            assert v in allowed, (trace_id, stage, q, v, allowed)


@pytest.mark.slow
def test_report_engine_spark_equals_duckdb_report(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`tracekit report --engine spark DIR` writes the figures `tracekit report` writes for
    the same traces (JSON report: every figure; the SQL shown is the same catalogue text)."""
    import tracekit.spark as tkspark

    # One trace (Spark runs a report's ~40 queries once per trace, ~2 s each): the export's
    # several traces, renumbered, are the catalogue test's.
    ranks = make_ranks(tmp_path / "ranks", real=(), synthetic=1)
    export_parquet([ranks], tmp_path / "pq")
    monkeypatch.setattr(tkspark, "local_session", lambda master=None: spark)
    monkeypatch.setattr(spark, "stop", lambda: None)  # the module's session outlives the report
    want, got = tmp_path / "duck.json", tmp_path / "spark.json"
    r = CliRunner().invoke(main, ["report", str(ranks), "--format", "json", "-o", str(want)])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(
        main,
        ["report", str(tmp_path / "pq"), "--engine", "spark", "--format", "json", "-o", str(got)],
    )
    assert r.exit_code == 0, r.output
    assert r.output == f"Wrote {got}\n"
    w, g = json.loads(want.read_text()), json.loads(got.read_text())
    assert len(g["traces"]) == len(w["traces"]) == 1
    _assert_same_json(w["traces"], g["traces"], "traces")


def _assert_same_json(want: Any, got: Any, where: str) -> None:
    if isinstance(want, dict):
        assert isinstance(got, dict) and got.keys() == want.keys(), where
        for k in want:
            _assert_same_json(want[k], got[k], f"{where}.{k}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), where
        for i, (a, b) in enumerate(zip(want, got, strict=True)):
            _assert_same_json(a, b, f"{where}[{i}]")
    else:
        assert same_value(want, got), f"{where}: {got!r} != {want!r}"
