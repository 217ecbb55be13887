"""Reads one archive table with pyarrow or DuckDB and prints its rows as JSON.

Usage: read_archive.py --engine pyarrow|duckdb --data-dir DIR --table spans|logs|requests

Rows are sorted by every column's text so that readers can be compared row for row.
Timestamps are printed as integer nanoseconds, maps as objects; tenant, date and hour come
from the Hive partition folders and are read as strings.
"""

import argparse
import json
import os
import sys

TIMESTAMPS = {"start_time", "end_time", "time", "observed_time"}
MAPS = {"redactions", "tool_calls_by_tool"}


def rows_pyarrow(path):
    import pyarrow as pa
    import pyarrow.dataset as ds

    part = ds.partitioning(
        pa.schema([("tenant", pa.string()), ("date", pa.string()), ("hour", pa.string())]),
        flavor="hive",
    )
    table = ds.dataset(path, format="parquet", partitioning=part).to_table()
    cols = {}
    for name in table.column_names:
        col = table.column(name)
        if name in TIMESTAMPS:
            col = col.cast(pa.int64())
        cols[name] = col.to_pylist()
    n = table.num_rows
    rows = []
    for i in range(n):
        row = {}
        for name, values in cols.items():
            v = values[i]
            if name in MAPS:
                v = {k: c for k, c in (v or [])}
            row[name] = v
        rows.append(row)
    return rows


def rows_duckdb(path):
    import duckdb

    con = duckdb.connect()
    glob = os.path.join(path, "**", "*.parquet")
    rel = con.sql(
        f"SELECT * FROM read_parquet('{glob}', hive_partitioning = true, hive_types_autocast = false)"
    )
    names = rel.columns
    select = ", ".join(
        f"epoch_ns({n}) AS {n}" if n in TIMESTAMPS else n for n in names
    )
    rel = con.sql(
        f"SELECT {select} FROM read_parquet('{glob}', hive_partitioning = true, hive_types_autocast = false)"
    )
    rows = []
    for values in rel.fetchall():
        row = dict(zip(names, values))
        for name in MAPS:
            v = row.get(name)
            if isinstance(v, dict) and set(v) == {"key", "value"}:
                row[name] = dict(zip(v["key"], v["value"]))
        rows.append(row)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", choices=["pyarrow", "duckdb"], required=True)
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--table", required=True)
    args = ap.parse_args()
    path = os.path.join(args.data_dir, args.table)
    rows = rows_pyarrow(path) if args.engine == "pyarrow" else rows_duckdb(path)
    rows.sort(key=lambda r: json.dumps(r, sort_keys=True, default=str))
    json.dump(rows, sys.stdout, default=str)


if __name__ == "__main__":
    main()
