"""Sends a secret first in context, then bare, with the official OpenTelemetry Python SDK.

Usage: send_learned.py --endpoint URL --secret S --idempotency-key K [--phase context|bare|both]

Phase `context` (one trace export, tenant acme): a tool span whose output holds
`aws_secret_access_key=S` (removed where it stands) and whose idempotency key K is echoed in
its tool arguments and its status message. Phase `bare` (log exports sent after that): a log
record of acme whose body is `{"k": "S"}`, one whose body echoes K, and a log record of tenant
globex whose body is `{"k": "S"}`. `both` runs the two phases in order, flushing in between,
so the bare sightings arrive in later batches. Prints the trace id as JSON.
"""

import argparse
import json

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry._logs import SeverityNumber
from opentelemetry.trace import Status, StatusCode
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter


def resource(tenant):
    return Resource.create({"service.name": "executor", "executor.tenant_id": tenant})


def context_phase(endpoint, secret, idem):
    provider = TracerProvider(resource=resource("acme"))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=endpoint + "/v1/traces")))
    tracer = provider.get_tracer("learned")
    with tracer.start_as_current_span("execute_tool deploy") as span:
        span.set_attribute("gen_ai.operation.name", "execute_tool")
        span.set_attribute("gen_ai.tool.name", "deploy")
        span.set_attribute("executor.idempotency_key", idem)
        span.set_attribute(
            "gen_ai.tool.call.arguments", json.dumps({"order": "A-1", "previous_attempt": idem})
        )
        span.set_attribute("tool.output", "wrote ~/.aws/credentials: aws_secret_access_key=" + secret)
        span.set_status(Status(StatusCode.ERROR, "retry of " + idem + " failed"))
        trace_id = format(span.get_span_context().trace_id, "032x")
    provider.force_flush()
    provider.shutdown()
    return trace_id


def log(provider_tenant, endpoint, bodies):
    provider = LoggerProvider(resource=resource(provider_tenant))
    provider.add_log_record_processor(
        SimpleLogRecordProcessor(OTLPLogExporter(endpoint=endpoint + "/v1/logs"))
    )
    logger = provider.get_logger("learned")
    for body in bodies:
        logger.emit(body=body, severity_number=SeverityNumber.INFO, severity_text="INFO")
    provider.force_flush()
    provider.shutdown()


def bare_phase(endpoint, secret, idem):
    log("acme", endpoint, [json.dumps({"k": secret}), "idempotency key " + idem + " reused"])
    log("globex", endpoint, [json.dumps({"k": secret})])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--secret", required=True)
    ap.add_argument("--idempotency-key", required=True)
    ap.add_argument("--phase", choices=["context", "bare", "both"], default="both")
    args = ap.parse_args()
    out = {}
    if args.phase in ("context", "both"):
        out["trace_id"] = context_phase(args.endpoint, args.secret, args.idempotency_key)
    if args.phase in ("bare", "both"):
        bare_phase(args.endpoint, args.secret, args.idempotency_key)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
