"""Sends one known agent run with the official OpenTelemetry Python SDK exporters.

Usage: send_otlp.py --protocol grpc|http --endpoint URL [--gzip]

Prints JSON describing the ids the SDK generated, so the caller can look the spans up in
the archive. Attribute values are fixed; tests/it/python_sdk.rs asserts them exactly.
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
from opentelemetry.trace import SpanKind, Status, StatusCode

BASE = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z
MS = 1_000_000


def exporters(protocol, endpoint, gzip):
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
        from opentelemetry.exporter.otlp.proto.grpc.exporter import Compression

        comp = Compression.Gzip if gzip else Compression.NoCompression
        return (
            OTLPSpanExporter(endpoint=endpoint, insecure=True, compression=comp),
            OTLPLogExporter(endpoint=endpoint, insecure=True, compression=comp),
        )
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
    from opentelemetry.exporter.otlp.proto.http import Compression

    comp = Compression.Gzip if gzip else Compression.NoCompression
    return (
        OTLPSpanExporter(endpoint=endpoint + "/v1/traces", compression=comp),
        OTLPLogExporter(endpoint=endpoint + "/v1/logs", compression=comp),
    )


def ids(span):
    ctx = span.get_span_context()
    return format(ctx.trace_id, "032x"), format(ctx.span_id, "016x")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--protocol", choices=["grpc", "http"], required=True)
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--gzip", action="store_true")
    args = ap.parse_args()

    resource = Resource.create(
        {"service.name": "py-executor", "executor.tenant_id": "acme"}
    )
    span_exporter, log_exporter = exporters(args.protocol, args.endpoint, args.gzip)
    # Simple processors export synchronously, so export errors surface before we exit.
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(SimpleSpanProcessor(span_exporter))
    logs = LoggerProvider(resource=resource)
    logs.add_log_record_processor(SimpleLogRecordProcessor(log_exporter))
    tracer = provider.get_tracer("py-executor", "1.2.3")
    logger = logs.get_logger("executor.policy")

    out = {"spans": {}, "logs": []}
    root = tracer.start_span(
        "invoke_agent support",
        kind=SpanKind.INTERNAL,
        start_time=BASE,
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "support",
            "executor.request_id": "req-py-1",
            "executor.principal_id": "alice",
            "executor.stop_reason": "completed",
        },
    )
    root_ctx = trace.set_span_in_context(root)
    chat = tracer.start_span(
        "chat claude",
        context=root_ctx,
        kind=SpanKind.CLIENT,
        start_time=BASE + 1 * MS,
        attributes={
            "gen_ai.operation.name": "chat",
            "gen_ai.system": "anthropic",
            "gen_ai.request.model": "claude-sonnet-4",
            "gen_ai.response.model": "claude-sonnet-4-20250514",
            "gen_ai.usage.prompt_tokens": 1200,
            "gen_ai.usage.output_tokens": 340,
            "gen_ai.usage.cache_write.input_tokens": 100,
            "gen_ai.response.finish_reasons": ["tool_calls"],
            "executor.request_id": "req-py-1",
        },
    )
    chat.end(end_time=BASE + 801 * MS)
    tool = tracer.start_span(
        "execute_tool refund_order",
        context=root_ctx,
        kind=SpanKind.INTERNAL,
        start_time=BASE + 900 * MS,
        attributes={
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "refund_order",
            "gen_ai.tool.call.id": "call_42",
            "gen_ai.tool.type": "function",
            "gen_ai.tool.call.arguments": '{"order_id":"ORD-1","amount_cents":1250}',
            "gen_ai.tool.call.result": '{"status":"refunded"}',
            "executor.request_id": "req-py-1",
            "executor.principal_id": "alice",
            "executor.effect_class": "write",
            "executor.policy_decision": "require_confirmation",
            "executor.policy_reason": "refund.over_limit",
            "executor.idempotency_key": "idem-py-secret-1",
            "executor.retry_attempt": 1,
            "executor.timeout_ms": 30000,
            "executor.result_code": "ok",
            "executor.result_bytes": 21,
            "executor.confirmation_status": "approved",
            "executor.resource_id": "orders/ORD-1",
            "executor.tool_version": "2.3.0",
            "executor.claimed_cost_usd": 0.0042,
            "custom.note": "kept",
        },
    )
    tool.add_event(
        "executor.confirmation", {"confirmation.by": "bob"}, timestamp=BASE + 950 * MS
    )
    tool_ctx = trace.set_span_in_context(tool)
    down = tracer.start_span(
        "POST /refunds",
        context=tool_ctx,
        kind=SpanKind.CLIENT,
        start_time=BASE + 1000 * MS,
        attributes={"http.request.method": "POST", "http.response.status_code": 201},
    )
    logger.emit(
        timestamp=BASE + 960 * MS,
        observed_timestamp=BASE + 961 * MS,
        context=tool_ctx,
        severity_number=SeverityNumber.WARN,
        severity_text="WARN",
        body="confirmation requested",
        attributes={
            "executor.policy_decision": "require_confirmation",
            "executor.request_id": "req-py-1",
        },
        event_name="executor.confirmation_requested",
    )
    down.end(end_time=BASE + 1100 * MS)
    tool.set_status(Status(StatusCode.OK))
    tool.end(end_time=BASE + 1200 * MS)
    root.end(end_time=BASE + 1300 * MS)

    for name, span in [
        ("root", root),
        ("chat", chat),
        ("tool", tool),
        ("down", down),
    ]:
        trace_id, span_id = ids(span)
        out["spans"][name] = {"trace_id": trace_id, "span_id": span_id}
    provider.shutdown()
    logs.shutdown()
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
