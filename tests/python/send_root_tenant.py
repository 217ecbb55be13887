"""One agent run whose tenant only the root span names, sent by the official OpenTelemetry
Python SDK the way auto-instrumented services send it: every span is exported as it ends
(children before their root), from two services (the executor and a downstream API whose
spans carry no executor.* attributes at all), plus a log record of the downstream service, a late span that claims another
tenant, and one span of an unrelated trace that never names a tenant.

Usage: send_root_tenant.py --protocol grpc|http --endpoint URL

Prints the ids the SDK generated as JSON; tests/it/tenancy.rs asserts where each is filed.
"""

import argparse
import json
import sys

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry._logs import SeverityNumber
from opentelemetry.trace import SpanKind

from send_otlp import exporters, ids

BASE = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z
MS = 1_000_000


def provider(service, protocol, endpoint):
    span_exporter, log_exporter = exporters(protocol, endpoint, False)
    resource = Resource.create({"service.name": service})
    tp = TracerProvider(resource=resource)
    # Simple processors export each span as it ends: children reach toolwatch first.
    tp.add_span_processor(SimpleSpanProcessor(span_exporter))
    lp = LoggerProvider(resource=resource)
    lp.add_log_record_processor(SimpleLogRecordProcessor(log_exporter))
    return tp, lp


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--protocol", choices=["grpc", "http"], required=True)
    ap.add_argument("--endpoint", required=True)
    args = ap.parse_args()

    executor, _ = provider("agent-executor", args.protocol, args.endpoint)
    api, api_logs = provider("billing-api", args.protocol, args.endpoint)
    tracer = executor.get_tracer("agent-executor")
    api_tracer = api.get_tracer("billing-api")
    logger = api_logs.get_logger("billing-api")

    root = tracer.start_span(
        "invoke_agent support",
        start_time=BASE,
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            "executor.request_id": "req-root-1",
            "executor.tenant_id": "acme",
            "executor.stop_reason": "completed",
        },
    )
    root_ctx = trace.set_span_in_context(root)
    chat = tracer.start_span(
        "chat gpt-4o",
        context=root_ctx,
        kind=SpanKind.CLIENT,
        start_time=BASE + 1 * MS,
        attributes={
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "openai",
            "gen_ai.request.model": "gpt-4o",
            "gen_ai.usage.input_tokens": 900,
            "gen_ai.usage.output_tokens": 100,
        },
    )
    chat.end(end_time=BASE + 400 * MS)
    tool = tracer.start_span(
        "execute_tool refund_order",
        context=root_ctx,
        start_time=BASE + 500 * MS,
        attributes={
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "refund_order",
            "executor.request_id": "req-root-1",
        },
    )
    tool_ctx = trace.set_span_in_context(tool)
    # The downstream service: no executor.* attributes, only the trace context.
    server = api_tracer.start_span(
        "POST /refunds", context=tool_ctx, kind=SpanKind.SERVER, start_time=BASE + 600 * MS
    )
    server_ctx = trace.set_span_in_context(server)
    db = api_tracer.start_span(
        "INSERT refunds",
        context=server_ctx,
        kind=SpanKind.CLIENT,
        start_time=BASE + 610 * MS,
        attributes={"db.system.name": "postgresql"},
    )
    db.end(end_time=BASE + 620 * MS)
    logger.emit(
        timestamp=BASE + 630 * MS,
        context=server_ctx,
        severity_number=SeverityNumber.INFO,
        body="refund stored",
    )
    server.end(end_time=BASE + 700 * MS)
    tool.end(end_time=BASE + 800 * MS)
    root.end(end_time=BASE + 900 * MS)
    # A late span of the trace that claims another tenant than the trace's.
    odd = tracer.start_span(
        "audit note",
        context=tool_ctx,
        start_time=BASE + 910 * MS,
        attributes={"executor.tenant_id": "globex"},
    )
    odd.end(end_time=BASE + 920 * MS)

    # An unrelated trace that never names a tenant.
    stray = api_tracer.start_span("GET /health", start_time=BASE + 1000 * MS)
    stray.end(end_time=BASE + 1001 * MS)

    out = {"trace_id": ids(root)[0], "spans": {}}
    for name, span in [
        ("root", root),
        ("chat", chat),
        ("tool", tool),
        ("server", server),
        ("db", db),
        ("odd", odd),
        ("stray", stray),
    ]:
        out["spans"][name] = ids(span)[1]
    out["stray_trace_id"] = ids(stray)[0]
    executor.shutdown()
    api.shutdown()
    api_logs.shutdown()
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
