"""Sends agent runs with the official OpenTelemetry Python SDK, one per finding rule, each
with its twin: the run whose executor skips a checklist step (one finding) and the run that
does it right (none). A canary goes into every tool's arguments: it must never reach a finding.

Usage: send_findings.py --endpoint URL --canary TEXT

Prints, per run, its trace id and the span ids of its root and calls as JSON.
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


def call(tool, args, effect, result, start, end, **extra):
    attrs = {"effect": effect, "result": result, "start": start, "end": end, "tool": tool, "args": args}
    attrs.update(extra)
    return attrs


ALLOW = {"executor.policy_decision": "allow"}

# request id -> (root attributes beyond the defaults, calls)
RUNS = {
    "write-no-allow": ({}, [call("add_order_note", {"order": "o-1"}, "write", "ok", 10, 20)]),
    "write-allowed": ({}, [call("add_order_note", {"order": "o-1"}, "write", "ok", 10, 20, **ALLOW)]),
    "high-impact-unconfirmed": ({}, [call("refund_order", {"order": "o-2"}, "high_impact", "ok", 10, 20, **ALLOW, **{"executor.confirmation_status": "pending"})]),
    "high-impact-confirmed": ({}, [call("refund_order", {"order": "o-2"}, "high_impact", "ok", 10, 20, **ALLOW, **{"executor.confirmation_status": "approved"})]),
    "ambiguous-no-key": ({}, [
        call("add_order_note", {"order": "o-3", "note": "x"}, "write", "timeout", 10, 20, **ALLOW),
        call("add_order_note", {"note": "x", "order": "o-3"}, "write", "ok", 30, 40, **ALLOW),
    ]),
    "ambiguous-same-key": ({}, [
        call("add_order_note", {"order": "o-3", "note": "x"}, "write", "timeout", 10, 20, **ALLOW, **{"executor.idempotency_key": "idem-o3-1"}),
        call("add_order_note", {"order": "o-3", "note": "x"}, "write", "ok", 30, 40, **ALLOW, **{"executor.idempotency_key": "idem-o3-1"}),
    ]),
    "ambiguous-new-key": ({}, [
        call("add_order_note", {"order": "o-4", "note": "x"}, "write", "error", 10, 20, **ALLOW, **{"executor.idempotency_key": "idem-o4-1"}),
        call("add_order_note", {"order": "o-4", "note": "x"}, "write", "ok", 30, 40, **ALLOW, **{"executor.idempotency_key": "idem-o4-2"}),
    ]),
    "retry-after-deny": ({}, [
        call("export_customers", {"all": True}, "read", "denied", 10, 20, **{"executor.policy_decision": "deny"}),
        call("export_customers", {"all": True}, "read", "denied", 30, 40, **{"executor.policy_decision": "deny"}),
    ]),
    "no-retry-after-deny": ({}, [
        call("export_customers", {"all": True}, "read", "denied", 10, 20, **{"executor.policy_decision": "deny"}),
        call("export_customers", {"customer": "c-9"}, "read", "denied", 30, 40, **{"executor.policy_decision": "deny"}),
    ]),
    "parallel-writes": ({}, [
        call("add_order_note", {"n": 1}, "write", "ok", 10, 50, **ALLOW, **{"executor.resource_id": "order-o-5"}),
        call("add_order_note", {"n": 2}, "write", "ok", 20, 60, **ALLOW, **{"executor.resource_id": "order-o-5"}),
    ]),
    "serial-writes": ({}, [
        call("add_order_note", {"n": 1}, "write", "ok", 10, 50, **ALLOW, **{"executor.resource_id": "order-o-5"}),
        call("add_order_note", {"n": 2}, "write", "ok", 50, 60, **ALLOW, **{"executor.resource_id": "order-o-5"}),
    ]),
    "no-stop-reason": ({"executor.stop_reason": None}, [call("search_orders", {"q": "late"}, "read", "ok", 10, 20, **ALLOW)]),
    "success-after-failure": ({}, [call("search_orders", {"q": "late"}, "read", "error", 10, 20, **ALLOW)]),
    "success-after-success": ({}, [call("search_orders", {"q": "late"}, "read", "ok", 10, 20, **ALLOW)]),
    "cost-disagrees": ({"executor.claimed_cost_usd": 5.0}, []),
    "cost-agrees": ({"executor.claimed_cost_usd": 0.0}, []),
}


def send(tracer, request, root_extra, calls, canary, offset):
    attrs = {
        "gen_ai.operation.name": "invoke_agent",
        "executor.request_id": request,
        "executor.tenant_id": "acme",
        "executor.stop_reason": "completed",
    }
    for k, v in root_extra.items():
        if v is None:
            attrs.pop(k, None)
        else:
            attrs[k] = v
    root = tracer.start_span("invoke_agent orders", start_time=BASE + offset, attributes=attrs)
    ctx = trace.set_span_in_context(root)
    out = {"calls": []}
    for c in calls:
        a = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": c["tool"],
            "gen_ai.tool.call.arguments": json.dumps(dict(c["args"], note_text=canary)),
            "executor.effect_class": c["effect"],
            "executor.result_code": c["result"],
        }
        a.update({k: v for k, v in c.items() if k.startswith("executor.")})
        span = tracer.start_span(
            "execute_tool " + c["tool"], context=ctx, start_time=BASE + offset + c["start"] * MS, attributes=a
        )
        span.end(end_time=BASE + offset + c["end"] * MS)
        out["calls"].append(ids(span)[1])
    root.end(end_time=BASE + offset + 100 * MS)
    out["trace_id"], out["root"] = ids(root)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--canary", required=True)
    args = ap.parse_args()
    span_exporter, _ = exporters("grpc", args.endpoint, False)
    tp = TracerProvider(resource=Resource.create({"service.name": "order-executor"}))
    tp.add_span_processor(SimpleSpanProcessor(span_exporter))
    tracer = tp.get_tracer("order-executor")
    out = {}
    for i, (request, (root_extra, calls)) in enumerate(RUNS.items()):
        out[request] = send(tracer, request, root_extra, calls, args.canary, i * 1000 * MS)
    tp.shutdown()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
