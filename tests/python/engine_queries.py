"""Runs named SQL queries over the archive with Apache Spark (local mode) or DuckDB and
prints {name: [row, ...]} as JSON, each row an object of its columns.

Usage: engine_queries.py --engine spark|duckdb --data-dir DIR --queries FILE [--ddl FILE]

With --ddl (Spark), the tables are those the file's statements define (the output of
`toolwatch ddl --engine spark`), else views over the folders.

FILE holds {name: sql}. Both engines see the tables `spans`, `logs` and `requests` with the
Hive partition columns tenant, date and hour as strings and every timestamp column as BIGINT
nanoseconds since the epoch (Spark reads Parquet nanosecond timestamps only that way), so one
SQL text runs on both and on DataFusion (`toolwatch query`, where `CAST(t AS BIGINT)` of a
timestamp is its nanoseconds too).
"""

import argparse
import glob
import json
import os
import shutil
import sys
import tempfile

TABLES = ["spans", "logs", "requests"]
TIMESTAMPS = ["start_time", "end_time", "time", "observed_time"]


def has_files(path):
    return bool(glob.glob(os.path.join(path, "**", "*.parquet"), recursive=True))


def run_spark(data_dir, queries, ddl=None):
    from pyspark.sql import SparkSession

    warehouse = tempfile.mkdtemp(prefix="toolwatch-spark-")
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("toolwatch-archive")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        # Parquet INT64 TIMESTAMP(NANOS) columns: read as their nanoseconds.
        .config("spark.sql.legacy.parquet.nanosAsLong", "true")
        # tenant, date and hour stay the strings the folders name.
        .config("spark.sql.sources.partitionColumnTypeInference.enabled", "false")
        .config("spark.driver.memory", "1g")
        # The DDL's tables would otherwise leave a spark-warehouse/ folder in the working
        # directory (the repository checkout): a temporary folder instead.
        .config("spark.sql.warehouse.dir", warehouse)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        if ddl:
            # The definitions `toolwatch ddl --engine spark` printed, statement by statement.
            for statement in ddl.split(";\n"):
                if statement.strip():
                    spark.sql(statement)
        else:
            for table in TABLES:
                path = os.path.join(data_dir, table)
                if has_files(path):
                    spark.read.option("basePath", path).parquet(path).createOrReplaceTempView(table)
        out = {}
        for name, sql in queries.items():
            out[name] = [row.asDict() for row in spark.sql(sql).collect()]
        return out
    finally:
        spark.stop()
        shutil.rmtree(warehouse, ignore_errors=True)


def run_duckdb(data_dir, queries):
    import duckdb

    con = duckdb.connect()
    for table in TABLES:
        path = os.path.join(data_dir, table)
        if not has_files(path):
            continue
        source = (
            f"read_parquet('{os.path.join(path, '**', '*.parquet')}', "
            "hive_partitioning = true, hive_types_autocast = false)"
        )
        names = con.sql(f"SELECT * FROM {source}").columns
        replace = [f"epoch_ns({n}) AS {n}" for n in TIMESTAMPS if n in names]
        star = f"* REPLACE ({', '.join(replace)})" if replace else "*"
        con.sql(f"CREATE VIEW {table} AS SELECT {star} FROM {source}")
    out = {}
    for name, sql in queries.items():
        rel = con.sql(sql)
        out[name] = [dict(zip(rel.columns, r)) for r in rel.fetchall()]
    return out


def plain(v):
    """JSON-ready: exact integers stay integers; decimals from sums become integers."""
    from decimal import Decimal

    if isinstance(v, Decimal):
        return int(v) if v == v.to_integral_value() else float(v)
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    if isinstance(v, dict):
        return {str(k): plain(x) for k, x in v.items()}
    return v


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", choices=["spark", "duckdb"], required=True)
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--queries", required=True)
    ap.add_argument("--ddl", help="Spark: table definitions to run instead of reading the folders")
    args = ap.parse_args()
    with open(args.queries) as f:
        queries = json.load(f)
    if args.engine == "spark":
        ddl = None
        if args.ddl:
            with open(args.ddl) as f:
                ddl = f.read()
        out = run_spark(args.data_dir, queries, ddl)
    else:
        out = run_duckdb(args.data_dir, queries)
    json.dump(plain(out), sys.stdout)


if __name__ == "__main__":
    main()
