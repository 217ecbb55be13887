#!/usr/bin/env python3
"""Acknowledgement-to-visible latency for `toolwatch query` and `toolwatch trace` while serving.

Usage: .venv/bin/python benches/visible_latency.py TOOLWATCH_BINARY [--spans N] [--config FILE]
       [--quiet-period 1s] [--summaries K] [--load RATE]

Starts `toolwatch serve` (fresh data directory, free ports, defaults: files complete after
`archive.max_file_age`, 5 minutes, so everything seen came from what `query` and `trace`
ask of the daemon first: copies of its buffers since 2026-12-01, a flush of them before;
see schemas/archive.md, Fresh reads), then
N times: exports one finished SDK span (an `invoke_agent` root with a fresh request id) with
the official OpenTelemetry OTLP/HTTP exporter; the clock starts when `export()` returns
SUCCESS (toolwatch answers once the span is protected and fsynced in its journal) and stops
when a poll sees it: for even spans `toolwatch query "SELECT count(*) FROM spans WHERE
trace_id = ..."` returns 1, for odd spans `toolwatch trace <request id>` finds the request.
Each poll is a whole CLI run (process start, asking the daemon, a DataFusion session), as a responder
would see it; the time of one `--no-flush` run on its own is printed as the floor. With
--load RATE, `toolwatch loadgen` sends RATE agent runs a second meanwhile (fresh ids), so the
flush competes with intake. At the end: the spans files written (one per flush at most).
With --summaries K, K more requests are timed until their summary is in `requests`
(`assemble.quiet_period` + the poll).
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

import daemon

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter


def one_span(request_id):
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create(
        {"service.name": "visible-bench", "executor.tenant_id": "bench"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("visible-bench")
    with tracer.start_as_current_span("invoke_agent") as root:
        root.set_attribute("gen_ai.operation.name", "invoke_agent")
        root.set_attribute("executor.request_id", request_id)
    spans = memory.get_finished_spans()
    return spans, format(spans[0].context.trace_id, "032x")


def run(binary, data, args):
    return subprocess.run([binary, *args[:1], "--data-dir", data, *args[1:]],
                          capture_output=True, text=True)


def poll(check, timeout=30.0):
    """Seconds until check() is true (polling back to back)."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        if check():
            return time.perf_counter()
    raise AssertionError("not visible in time")


def pct(xs, f):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(f * len(xs)))] * 1000


def report(name, xs):
    if xs:
        print(f"{name}: n={len(xs)} p50 {pct(xs, 0.5):.0f} ms, p90 {pct(xs, 0.9):.0f} ms, "
              f"p95 {pct(xs, 0.95):.0f} ms, p99 {pct(xs, 0.99):.0f} ms, max {max(xs) * 1000:.0f} ms"
              f" (p99 is the slowest run below 100 samples)")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("binary")
    p.add_argument("--spans", type=int, default=100)
    p.add_argument("--config")
    p.add_argument("--quiet-period", default="1s")
    p.add_argument("--summaries", type=int, default=5)
    p.add_argument("--load", type=int, default=0, help="background agent runs per second")
    args = p.parse_args()

    os.environ["TOOLWATCH_ASSEMBLE__QUIET_PERIOD"] = args.quiet_period
    work = tempfile.mkdtemp()
    data = os.path.join(work, "data")
    serve, ready, _, _ = daemon.start(args.binary, data, os.path.join(work, "serve.log"),
                                      args.config)
    load = None
    if args.load:
        load = subprocess.Popen([args.binary, "loadgen", "--target", f"http://{ready['otlp_grpc']}",
                                 "--requests", "1000000", "--tenants", "20",
                                 "--rate", str(args.load)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    exporter = OTLPSpanExporter(endpoint=f"http://{ready['otlp_http']}/v1/traces")
    try:
        floor = []
        for _ in range(5):
            t0 = time.perf_counter()
            run(args.binary, data, ["query", "--no-flush", "--format", "csv", "SELECT 1"])
            floor.append(time.perf_counter() - t0)
        report("one `toolwatch query --no-flush` run (floor)", floor)

        by_query, by_trace, by_summary = [], [], []
        for n in range(args.spans + args.summaries):
            request_id = f"vis-{n}"
            spans, trace_id = one_span(request_id)
            assert exporter.export(spans) == SpanExportResult.SUCCESS
            acked = time.perf_counter()
            if n >= args.spans:
                sql = f"SELECT count(*) FROM requests WHERE request_id = '{request_id}'"
                seen = poll(lambda: run(args.binary, data,
                                        ["query", "--format", "csv", sql]).stdout.split()[-1:] == ["1"])
                by_summary.append(seen - acked)
            elif n % 2 == 0:
                sql = f"SELECT count(*) FROM spans WHERE trace_id = '{trace_id}'"
                seen = poll(lambda: run(args.binary, data,
                                        ["query", "--format", "csv", sql]).stdout.split()[-1:] == ["1"])
                by_query.append(seen - acked)
            else:
                seen = poll(lambda: run(args.binary, data,
                                        ["trace", "--json", request_id]).returncode == 0)
                by_trace.append(seen - acked)
        # Where a poll's time goes, under the same load: the flush alone (a query that reads
        # nothing), and reading alone (no flush).
        parts = {"`query \"SELECT 1\"` (asking the daemon, nothing read)": ["query", "--format", "csv", "SELECT 1"],
                 "`query --no-flush \"SELECT 1\"`": ["query", "--no-flush", "--format", "csv", "SELECT 1"],
                 "`trace --no-flush` (reading alone)": ["trace", "--no-flush", "--json", f"vis-{args.spans - 1}"]}
        for name, cmd in parts.items():
            took = []
            for _ in range(20):
                t0 = time.perf_counter()
                run(args.binary, data, cmd)
                took.append(time.perf_counter() - t0)
            report(f"under load, one {name} run", took)
        report("ack to visible, `query`", by_query)
        report("ack to visible, `trace`", by_trace)
        report(f"ack to summary in `requests` (quiet_period {args.quiet_period})", by_summary)
        # The daemon's own timing of the flushes (histograms; the mean of each).
        import urllib.request
        text = urllib.request.urlopen(f"http://{ready['admin']}/metrics").read().decode()
        sums = {}
        for line in text.splitlines():
            for kind in ("_sum", "_count"):
                for family in ("toolwatch_archive_reader_flush_seconds",
                               "toolwatch_archive_reader_copy_seconds",
                               "toolwatch_archive_reader_flush_write_seconds"):
                    if line.startswith(family + kind):
                        name, value = line.rsplit(" ", 1)
                        key = family + name[len(family + kind):]
                        sums.setdefault(key, {})[kind] = float(value)
        for key, v in sorted(sums.items()):
            if v.get("_count"):
                print(f"daemon: {key}: {v['_count']:.0f} requests, mean {v['_sum'] / v['_count'] * 1000:.0f} ms")
        files = sum(len([f for f in fs if f.endswith(".parquet")])
                    for _, _, fs in os.walk(os.path.join(data, "spans")))
        print(f"spans files written: {files}")
    finally:
        if load:
            load.terminate()
            load.wait()
        serve.terminate()
        serve.wait()


if __name__ == "__main__":
    sys.exit(main())
