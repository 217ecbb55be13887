#!/usr/bin/env python3
"""Acknowledgement latency seen by the official OpenTelemetry Python SDK exporter.

Usage: .venv/bin/python benches/ack_latency.py TOOLWATCH_BINARY [--exports N] [--spans K]
       [--protocol http|grpc] [--concurrency C] [--config FILE]

Starts `toolwatch serve` (fresh data directory, free ports, optional config), then calls the
SDK's `OTLPSpanExporter.export()` N times with K finished spans each (tool-call spans with
JSON arguments, as an executor's batch processor would hand over) from C threads at once, and
times each call: the clock runs from `export()` being called to it returning SUCCESS, which
toolwatch answers only once the batch is protected and fsynced in its journal. Prints p50,
p90, p99 and max in milliseconds and the journal's commits per export (group commit at work).
"""

import argparse
import concurrent.futures
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

import daemon

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.export import SimpleSpanProcessor


def finished_spans(k, n):
    """K finished SDK spans (real ReadableSpan objects) for export number n."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "ack-bench", "executor.tenant_id": "bench"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("ack-bench")
    with tracer.start_as_current_span("invoke_agent") as root:
        root.set_attribute("gen_ai.operation.name", "invoke_agent")
        root.set_attribute("executor.request_id", f"ack-{n}")
        for i in range(k - 1):
            with tracer.start_as_current_span("execute_tool search_orders") as s:
                s.set_attribute("gen_ai.operation.name", "execute_tool")
                s.set_attribute("gen_ai.tool.name", "search_orders")
                s.set_attribute("gen_ai.tool.call.arguments", json.dumps({"customer": f"c-{i}", "page": i, "filter": "x" * 400}))
                s.set_attribute("executor.request_id", f"ack-{n}")
    return memory.get_finished_spans()


def metric(admin, name):
    text = urllib.request.urlopen(f"http://{admin}/metrics").read().decode()
    m = re.search(rf"^{re.escape(name)} ([0-9.e+]+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("binary")
    p.add_argument("--exports", type=int, default=1000)
    p.add_argument("--spans", type=int, default=50)
    p.add_argument("--protocol", choices=["http", "grpc"], default="http")
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--config")
    args = p.parse_args()

    work = tempfile.mkdtemp()
    serve, ready, _, _ = daemon.start(
        args.binary, os.path.join(work, "data"), os.path.join(work, "serve.log"), args.config)

    if args.protocol == "http":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        make = lambda: OTLPSpanExporter(endpoint=f"http://{ready['otlp_http']}/v1/traces")
    else:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        make = lambda: OTLPSpanExporter(endpoint=ready["otlp_grpc"], insecure=True)
    batches = [finished_spans(args.spans, n) for n in range(args.exports)]
    exporters = [make() for _ in range(args.concurrency)]

    def one(i):
        exporter = exporters[i % args.concurrency]
        t0 = time.perf_counter()
        result = exporter.export(batches[i])
        elapsed = (time.perf_counter() - t0) * 1000
        assert result == SpanExportResult.SUCCESS, result
        return elapsed

    # Warm-up: connections, the first segment file.
    for e in exporters:
        e.export(batches[0])
    commits0 = metric(ready["admin"], "toolwatch_journal_commits_total")
    records0 = metric(ready["admin"], "toolwatch_journal_records_total")
    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(args.concurrency) as pool:
        latencies = sorted(pool.map(one, range(args.exports)))
    wall = time.perf_counter() - started
    # The journal's counters are refreshed every second: wait for this run's records.
    deadline = time.perf_counter() + 5
    while (metric(ready["admin"], "toolwatch_journal_records_total") - records0 < args.exports
           and time.perf_counter() < deadline):
        time.sleep(0.1)
    commits = metric(ready["admin"], "toolwatch_journal_commits_total") - commits0
    records = metric(ready["admin"], "toolwatch_journal_records_total") - records0
    serve.terminate()
    serve.wait()
    q = lambda f: latencies[min(len(latencies) - 1, int(f * len(latencies)))]
    print(
        f"{args.exports} exports of {args.spans} spans over {args.protocol}, {args.concurrency} at once: "
        f"p50 {q(0.50):.2f} ms, p90 {q(0.90):.2f} ms, p99 {q(0.99):.2f} ms, max {latencies[-1]:.2f} ms; "
        f"{args.exports * args.spans / wall:,.0f} spans/s; journal {records:.0f} records in {commits:.0f} commits"
    )


if __name__ == "__main__":
    sys.exit(main())
