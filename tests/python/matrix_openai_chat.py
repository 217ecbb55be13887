"""One agent run through an OpenAI instrumentation library, as shipped.

Usage: matrix_openai_chat.py --library openai-v2|openllmetry|openinference
                             --endpoint http://HOST:PORT [--content] [--events]

  openai-v2      the official opentelemetry-instrumentation-openai-v2 (content only with
                 --content: OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT; with
                 --events, on `gen_ai.client.inference.operation.details` log records
                 instead of the spans, exported over OTLP/HTTP logs)
  openllmetry    OpenLLMetry's opentelemetry-instrumentation-openai (content unless
                 TRACELOOP_TRACE_CONTENT=false, which is set without --content)
  openinference  openinference-instrumentation-openai (content unless OPENINFERENCE_HIDE_*,
                 set without --content)

The OpenAI client talks to the local stub (openai_stub.py): a model turn that calls the tool
`get_weather`, the tool run by the application, a second model turn that answers. The
instrumentation's own spans go to toolwatch over OTLP/HTTP with the SDK's exporter; the
application adds only what a real one would, the root span of the run. The user's message
carries a secret. Prints the run's trace id as JSON.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from openai_stub import OpenAIStub, TOOL_CALL_ID  # noqa: E402
from otel_setup import clear_environment, tracer_provider  # noqa: E402

SECRET = "AKIAQX7Z3K9M2P4V8R6T"


def instrumentor(library):
    """The library's instrumentor (one per process: they patch the same methods)."""
    if library == "openai-v2":
        # openai 3 ships httpx2; the instrumentation imports httpx (the alias it provides).
        import httpx2

        httpx2.alias_httpx()
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
    elif library == "openllmetry":
        from opentelemetry.instrumentation.openai import OpenAIInstrumentor
    else:
        from openinference.instrumentation.openai import OpenAIInstrumentor
    return OpenAIInstrumentor()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--library", choices=["openai-v2", "openllmetry", "openinference"], required=True)
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--content", action="store_true")
    ap.add_argument("--events", action="store_true")
    args = ap.parse_args()
    # Each library's own switch, set both ways before it is imported (nothing inherited).
    clear_environment("OPENINFERENCE_", "TRACELOOP_")
    os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = (
        ("event_only" if args.events else "span_only") if args.content else "NO_CONTENT"
    )
    os.environ["TRACELOOP_TRACE_CONTENT"] = "true" if args.content else "false"
    for part in ["INPUTS", "OUTPUTS", "INPUT_MESSAGES", "OUTPUT_MESSAGES"]:
        os.environ["OPENINFERENCE_HIDE_" + part] = "false" if args.content else "true"
    from openai import OpenAI
    from opentelemetry import trace

    provider = tracer_provider(
        args.endpoint, {"service.name": "weather-agent", "executor.tenant_id": "acme"}
    )
    logs = None
    if args.events:
        from opentelemetry import _logs
        from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
        from opentelemetry.sdk._logs import LoggerProvider
        from opentelemetry.sdk._logs.export import BatchLogRecordProcessor

        logs = LoggerProvider(resource=provider.resource)
        logs.add_log_record_processor(
            BatchLogRecordProcessor(OTLPLogExporter(endpoint=args.endpoint + "/v1/logs"))
        )
        _logs.set_logger_provider(logs)
    instrumentor(args.library).instrument()

    stub = OpenAIStub({"city": "Oslo"})
    client = OpenAI(base_url=stub.base_url, api_key="sk-local-stub", max_retries=0)
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]
    tracer = trace.get_tracer("weather-agent")
    with tracer.start_as_current_span("weather run") as root:
        messages = [
            {"role": "system", "content": "You answer weather questions."},
            {"role": "user", "content": f"Weather in Oslo? My AWS key is {SECRET}."},
        ]
        first = client.chat.completions.create(model="gpt-4o-mini", messages=messages, tools=tools)
        call = first.choices[0].message.tool_calls[0]
        assert call.id == TOOL_CALL_ID
        messages.append(first.choices[0].message.model_dump(exclude_none=True))
        messages.append({"role": "tool", "tool_call_id": call.id, "content": "4C"})
        client.chat.completions.create(model="gpt-4o-mini", messages=messages, tools=tools)
        trace_id = format(root.get_span_context().trace_id, "032x")
    assert provider.force_flush(), "the spans were not exported"
    provider.shutdown()
    if logs is not None:
        assert logs.force_flush(), "the log records were not exported"
        logs.shutdown()
    stub.close()
    print(json.dumps({"trace_id": trace_id, "stub_requests": len(stub.requests)}))


if __name__ == "__main__":
    main()
