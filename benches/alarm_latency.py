#!/usr/bin/env python3
"""Alarm latency: from sending the span that crosses a budget to the alarm reaching a webhook.

Usage: benches/alarm_latency.py TOOLWATCH_BINARY [--requests N] [--load-rate R] [--load-tenants T]

Starts `toolwatch serve` (fresh data directory, free ports) with a JSON webhook pointing at a
receiver in this process and a per-request budget of 10 tool calls. For each of N requests it
sends 9 tool spans in one OTLP/HTTP JSON export, then times the 10th: the clock starts just
before that POST and stops when the receiver gets the `limit` alarm for that request, so the
figure includes the export's own round trip. With --load-rate R, `toolwatch loadgen` sends
normal traffic at R agent runs per second (about 10 spans each) over T tenants (default
1,000) the whole time. Prints
p50, p90, p99 and max in milliseconds. Standard library only.
"""

import argparse
import http.server
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import daemon

arrivals = {}
arrived = threading.Condition()


class Hook(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        now = time.perf_counter()
        self.send_response(200)
        self.end_headers()
        for a in json.loads(body).get("alarms", []):
            if a["level"] == "limit" and a["budget"] == "tool_calls":
                with arrived:
                    arrivals.setdefault(a["request_id"], now)
                    arrived.notify_all()

    def log_message(self, *args):
        pass


def span(request_id, trace_id, i, now_ns):
    kv = lambda k, v: {"key": k, "value": {"stringValue": v}}
    return {
        "traceId": trace_id,
        "spanId": f"{i + 1:016x}",
        "name": "execute_tool search_orders",
        "startTimeUnixNano": str(now_ns - 2_000_000),
        "endTimeUnixNano": str(now_ns - 1_000_000),
        "attributes": [
            kv("gen_ai.operation.name", "execute_tool"),
            kv("gen_ai.tool.name", "search_orders"),
            kv("gen_ai.tool.call.arguments", json.dumps({"page": i})),
            kv("executor.request_id", request_id),
        ],
    }


def export(url, spans):
    body = {
        "resourceSpans": [
            {
                "resource": {"attributes": [{"key": "executor.tenant_id", "value": {"stringValue": "latency"}}]},
                "scopeSpans": [{"spans": spans}],
            }
        ]
    }
    req = urllib.request.Request(
        url + "/v1/traces", data=json.dumps(body).encode(), headers={"content-type": "application/json"}
    )
    with urllib.request.urlopen(req) as r:
        assert r.status == 200, r.status


def main():
    p = argparse.ArgumentParser()
    p.add_argument("binary")
    p.add_argument("--requests", type=int, default=500)
    p.add_argument("--load-rate", type=int, default=0)
    p.add_argument("--load-tenants", type=int, default=1000)
    args = p.parse_args()

    hook = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=hook.serve_forever, daemon=True).start()
    work = tempfile.mkdtemp()
    config = os.path.join(work, "toolwatch.toml")
    with open(config, "w") as f:
        f.write(
            f'[budget]\n[[budget.webhooks]]\nname = "hook"\nurl = "http://127.0.0.1:{hook.server_port}/hook"\n'
            "[budget.request]\ntool_calls = 10\nrepeated_calls = 0\n"
        )
    serve, ready, _, _ = daemon.start(
        args.binary, os.path.join(work, "data"), os.path.join(work, "serve.log"), config)
    http_url = "http://" + ready["otlp_http"]
    load = None
    if args.load_rate:
        load = subprocess.Popen(
            [args.binary, "loadgen", "--target", "http://" + ready["otlp_grpc"], "--rate",
             str(args.load_rate), "--requests", str(args.load_rate * 3600), "--tenants",
             str(args.load_tenants)],
            stdout=subprocess.DEVNULL,
        )
        time.sleep(2)
    latencies = []
    try:
        for n in range(args.requests):
            rid = f"lat-{n:06d}"
            trace = f"{n + 1:032x}"
            now_ns = time.time_ns()
            export(http_url, [span(rid, trace, i, now_ns) for i in range(9)])
            t0 = time.perf_counter()
            export(http_url, [span(rid, trace, 9, now_ns)])
            with arrived:
                ok = arrived.wait_for(lambda: rid in arrivals, timeout=30)
            assert ok, f"no alarm for {rid}"
            latencies.append((arrivals[rid] - t0) * 1000)
    finally:
        if load:
            load.terminate()
            load.wait()
        serve.terminate()
        serve.wait()
    latencies.sort()
    q = lambda f: latencies[min(len(latencies) - 1, int(f * len(latencies)))]
    print(
        f"{len(latencies)} alarms, background load {args.load_rate} runs/s: "
        f"p50 {q(0.50):.1f} ms, p90 {q(0.90):.1f} ms, p99 {q(0.99):.1f} ms, max {latencies[-1]:.1f} ms"
    )


if __name__ == "__main__":
    sys.exit(main())
