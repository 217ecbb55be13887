"""Sends two agent runs with the official OpenTelemetry Python SDK: one whose executor writes
without an allow decision (a finding), and its twin that asks first (none). A canary goes into
the tool arguments: it must never reach a finding.

Usage: send_findings.py --endpoint URL --canary TEXT

Prints the ids the SDK generated as JSON.
"""

import argparse
import json

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from send_otlp import exporters, ids

BASE = 1_767_243_600_000_000_000  # 2026-01-01T05:00:00Z
MS = 1_000_000


def run(tracer, request, decision, canary, offset):
    root = tracer.start_span(
        "invoke_agent orders",
        start_time=BASE + offset,
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            "executor.request_id": request,
            "executor.tenant_id": "acme",
            "executor.stop_reason": "completed",
        },
    )
    ctx = trace.set_span_in_context(root)
    attrs = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "add_order_note",
        "gen_ai.tool.call.arguments": json.dumps({"order": "o-17", "note": canary}),
        "executor.effect_class": "write",
        "executor.result_code": "ok",
        "executor.resource_id": "order-o-17",
    }
    if decision:
        attrs["executor.policy_decision"] = decision
    tool = tracer.start_span(
        "execute_tool add_order_note", context=ctx, start_time=BASE + offset + 10 * MS, attributes=attrs
    )
    tool.end(end_time=BASE + offset + 20 * MS)
    root.end(end_time=BASE + offset + 30 * MS)
    trace_id, root_id = ids(root)
    _, tool_id = ids(tool)
    return {"trace_id": trace_id, "root": root_id, "tool": tool_id}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--canary", required=True)
    args = ap.parse_args()
    span_exporter, _ = exporters("grpc", args.endpoint, False)
    tp = TracerProvider(resource=Resource.create({"service.name": "order-executor"}))
    tp.add_span_processor(SimpleSpanProcessor(span_exporter))
    tracer = tp.get_tracer("order-executor")
    out = {
        "bad": run(tracer, "req-no-allow", None, args.canary, 0),
        "good": run(tracer, "req-allowed", "allow", args.canary, 100 * MS),
    }
    tp.shutdown()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
