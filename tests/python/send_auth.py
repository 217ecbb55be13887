"""Sends one small agent run through the official OTLP exporters with whatever credentials the
environment gives them (OTEL_EXPORTER_OTLP_HEADERS="authorization=Bearer%20<token>", the
convention every OTLP exporter reads), and reports what each export returned.

Usage: send_auth.py --protocol grpc|http --endpoint URL --request ID [--claim TENANT]
                    [--canary TEXT] [--tls]

With --tls the exporters speak TLS, verifying the server against OTEL_EXPORTER_OTLP_CERTIFICATE
and presenting OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE / _CLIENT_KEY when set (the SDK's own
environment variables); --endpoint is then an https:// URL.

The run: a root span (claiming --claim as executor.tenant_id, if given), a child tool span
that names no tenant, and a log record of the child. --canary goes into the tool's arguments.
Spans and the log are collected in memory, then handed to the OTLP exporters directly so the
export result (SUCCESS or FAILURE) is known. Prints JSON: the ids, and both results.
"""

import argparse
import json

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor, InMemoryLogRecordExporter
from opentelemetry._logs import SeverityNumber
from opentelemetry import trace

from send_otlp import exporters, ids

BASE = 1_767_240_000_000_000_000  # 2026-01-01T04:00:00Z
MS = 1_000_000


def tls_exporters(protocol, endpoint):
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter

        return (
            OTLPSpanExporter(endpoint=endpoint, insecure=False),
            OTLPLogExporter(endpoint=endpoint, insecure=False),
        )
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter

    return (
        OTLPSpanExporter(endpoint=endpoint + "/v1/traces"),
        OTLPLogExporter(endpoint=endpoint + "/v1/logs"),
    )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--protocol", choices=["grpc", "http"], required=True)
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--request", required=True)
    ap.add_argument("--claim")
    ap.add_argument("--canary", default="none")
    ap.add_argument("--tls", action="store_true")
    args = ap.parse_args()

    resource = Resource.create({"service.name": "auth-executor"})
    spans = InMemorySpanExporter()
    tp = TracerProvider(resource=resource)
    tp.add_span_processor(SimpleSpanProcessor(spans))
    logs = InMemoryLogRecordExporter()
    lp = LoggerProvider(resource=resource)
    lp.add_log_record_processor(SimpleLogRecordProcessor(logs))
    tracer = tp.get_tracer("auth-executor")
    logger = lp.get_logger("auth-executor")

    root_attrs = {
        "gen_ai.operation.name": "invoke_agent",
        "executor.request_id": args.request,
    }
    if args.claim:
        root_attrs["executor.tenant_id"] = args.claim
    root = tracer.start_span("invoke_agent support", start_time=BASE, attributes=root_attrs)
    ctx = trace.set_span_in_context(root)
    tool = tracer.start_span(
        "execute_tool search_orders",
        context=ctx,
        start_time=BASE + 10 * MS,
        attributes={
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "search_orders",
            "gen_ai.tool.call.arguments": json.dumps({"q": "late orders", "token": args.canary}),
        },
    )
    with trace.use_span(tool, end_on_exit=False):
        logger.emit(
            timestamp=BASE + 15 * MS,
            severity_number=SeverityNumber.INFO,
            body="tool called",
            attributes={"executor.request_id": args.request},
        )
    tool.end(end_time=BASE + 20 * MS)
    root.end(end_time=BASE + 30 * MS)

    if args.tls:
        span_exporter, log_exporter = tls_exporters(args.protocol, args.endpoint)
    else:
        span_exporter, log_exporter = exporters(args.protocol, args.endpoint, False)
    span_result = span_exporter.export(list(spans.get_finished_spans()))
    log_result = log_exporter.export(list(logs.get_finished_logs()))
    trace_id, root_id = ids(root)
    _, tool_id = ids(tool)
    print(
        json.dumps(
            {
                "trace_id": trace_id,
                "root": root_id,
                "tool": tool_id,
                "spans": span_result.name,
                "logs": log_result.name,
            }
        )
    )


if __name__ == "__main__":
    main()
