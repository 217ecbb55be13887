"""Secrets seen in context, then bare, sent with the official OpenTelemetry Python SDK.

Usage: send_resighted.py --endpoint URL --plan FILE

FILE is JSON: {"contexts": [text, ...], "secrets": [text, ...]}. First (tenant acme) one tool
span per context text, the text in its `tool.output` attribute, exported and answered before
anything else is sent. Then, for each secret, three bare sightings of tenant acme: a log
record whose body is {"k": secret}, a span event whose `note` is "got <secret>", and a span
whose resource's `deploy.note` is the secret; and one log record of tenant globex whose body
is {"k": secret}. Every export uses the simple processors, so each call returns once its
export was answered. Prints {"acme_spans": n, "acme_logs": n, "globex_logs": n}.
"""

import argparse
import json

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

from send_learned import log


def resource(tenant, extra=None):
    attrs = {"service.name": "executor", "executor.tenant_id": tenant}
    attrs.update(extra or {})
    return Resource.create(attrs)


def tracer(endpoint, res):
    provider = TracerProvider(resource=res)
    provider.add_span_processor(
        SimpleSpanProcessor(OTLPSpanExporter(endpoint=endpoint + "/v1/traces"))
    )
    return provider, provider.get_tracer("resighted")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--plan", required=True)
    args = ap.parse_args()
    with open(args.plan) as f:
        plan = json.load(f)
    spans = 0

    provider, t = tracer(args.endpoint, resource("acme"))
    for text in plan["contexts"]:
        with t.start_as_current_span("execute_tool read_config") as span:
            span.set_attribute("gen_ai.operation.name", "execute_tool")
            span.set_attribute("gen_ai.tool.name", "read_config")
            span.set_attribute("tool.output", text)
        spans += 1
    provider.shutdown()

    bare = [json.dumps({"k": s}) for s in plan["secrets"]]
    log("acme", args.endpoint, bare)
    provider, t = tracer(args.endpoint, resource("acme"))
    for secret in plan["secrets"]:
        with t.start_as_current_span("execute_tool retry") as span:
            span.add_event("retry", {"note": "got " + secret})
        spans += 1
    provider.shutdown()
    for secret in plan["secrets"]:
        provider, t = tracer(args.endpoint, resource("acme", {"deploy.note": secret}))
        with t.start_as_current_span("execute_tool deploy"):
            pass
        spans += 1
        provider.shutdown()
    log("globex", args.endpoint, bare)
    print(json.dumps({"acme_spans": spans, "acme_logs": len(bare), "globex_logs": len(bare)}))


if __name__ == "__main__":
    main()
