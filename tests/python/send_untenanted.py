"""An executor that names no tenant anywhere, traced by the official OpenTelemetry Python SDK
with the BatchSpanProcessor its documentation recommends for production (spans go out in
batches from a background thread, each once it has ended, so a root that is still open is
never exported): first one complete agent run, then a looping agent whose root stays open.

Usage: send_untenanted.py --endpoint URL     (OTLP/HTTP, protobuf)

The script and tests/it/untenanted.rs talk in lines: the script prints one JSON line after
each step, once every span it ended so far was exported and answered 2xx (force_flush, with
an exporter that records each export's result), and waits for a word on stdin before the
next step:

  prints {"phase": "complete", ...}   one complete run (root, chat, tool, chat), exported
  reads  "loop"
  prints {"phase": "looping", ...}    the looping agent's root started, NOT ended; its 60 model
                                      turns and 60 identical tool calls ended and exported
  reads  "end"                        (end of input instead: exits, the root never ended)
  prints {"phase": "ended", ...}      the root ended and exported
"""

import argparse
import json
import sys
import time

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.trace import SpanKind

from send_otlp import ids

LOOP_TURNS = 60
TOOL_ARGUMENTS = '{"query": "status of order 42"}'


class Recording(SpanExporter):
    """The OTLP exporter, counting what was exported and answered 2xx, and what failed."""

    def __init__(self, inner):
        self.inner = inner
        self.acked = 0
        self.failed = 0

    def export(self, spans):
        result = self.inner.export(spans)
        if result == SpanExportResult.SUCCESS:
            self.acked += len(spans)
        else:
            self.failed += len(spans)
        return result

    def shutdown(self):
        self.inner.shutdown()

    def force_flush(self, timeout_millis=30000):
        return True


def flushed(provider, exporter, expected):
    """Force-flushes; fails unless exactly `expected` spans were exported and acknowledged."""
    if not provider.force_flush(timeout_millis=30000):
        sys.exit("force_flush timed out")
    if exporter.failed or exporter.acked != expected:
        sys.exit(f"exported {exporter.acked} spans, {exporter.failed} failed; expected {expected}")
    return exporter.acked


def say(line):
    print(json.dumps(line), flush=True)


def wait_for(word):
    line = sys.stdin.readline()
    if line.strip() != word:
        # The test went away (end of input) or said something else: leave, root open or not.
        sys.exit(0)


def chat(tracer, ctx, request_id, n):
    span = tracer.start_span(
        "chat gpt-4o",
        context=ctx,
        kind=SpanKind.CLIENT,
        attributes={
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "openai",
            "gen_ai.request.model": "gpt-4o",
            "gen_ai.response.model": "gpt-4o-2024-08-06",
            "gen_ai.usage.input_tokens": 100 * n,
            "gen_ai.usage.output_tokens": 20,
            "executor.request_id": request_id,
        },
    )
    span.end()
    return span


def tool(tracer, ctx, request_id, name, arguments, i):
    span = tracer.start_span(
        f"execute_tool {name}",
        context=ctx,
        kind=SpanKind.INTERNAL,
        attributes={
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": f"call_{i}",
            "gen_ai.tool.call.arguments": arguments,
            "gen_ai.tool.call.result": '{"status": "shipped"}',
            "executor.request_id": request_id,
            "executor.result_code": "ok",
        },
    )
    span.end()
    return span


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoint", required=True)
    args = ap.parse_args()

    exporter = Recording(OTLPSpanExporter(endpoint=args.endpoint + "/v1/traces", timeout=10))
    # No executor.tenant_id anywhere: not on the resource, not on any span.
    provider = TracerProvider(resource=Resource.create({"service.name": "untenanted-executor"}))
    # A long schedule delay: exports happen when the script force-flushes, so each step's
    # spans are acknowledged when its line is printed (the processor still batches them).
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=60_000))
    tracer = provider.get_tracer("untenanted-executor", "1.0.0")

    # (a) One complete agent run.
    request_id = "req-untenanted-1"
    root = tracer.start_span(
        "invoke_agent support",
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "support",
            "executor.request_id": request_id,
            "executor.stop_reason": "completed",
        },
    )
    ctx = trace.set_span_in_context(root)
    first = chat(tracer, ctx, request_id, 1)
    call = tool(tracer, ctx, request_id, "get_order", '{"order": 42}', 0)
    second = chat(tracer, ctx, request_id, 2)
    root.end()
    say(
        {
            "phase": "complete",
            "acked": flushed(provider, exporter, 4),
            "request_id": request_id,
            "trace_id": ids(root)[0],
            "spans": {
                "root": ids(root)[1],
                "chat1": ids(first)[1],
                "tool": ids(call)[1],
                "chat2": ids(second)[1],
            },
        }
    )

    # (b) A looping agent: the same tool call again and again, its root left open.
    wait_for("loop")
    request_id = "req-untenanted-loop"
    root = tracer.start_span(
        "invoke_agent looping",
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "looping",
            "executor.request_id": request_id,
        },
    )
    ctx = trace.set_span_in_context(root)
    for i in range(LOOP_TURNS):
        chat(tracer, ctx, request_id, 1)
        tool(tracer, ctx, request_id, "search_orders", TOOL_ARGUMENTS, i)
    say(
        {
            "phase": "looping",
            "acked": flushed(provider, exporter, 4 + 2 * LOOP_TURNS),
            "request_id": request_id,
            "trace_id": ids(root)[0],
            "root_span_id": ids(root)[1],
        }
    )

    wait_for("end")
    root.set_attribute("executor.stop_reason", "repeated_call")
    end_ns = time.time_ns()
    root.end(end_time=end_ns)
    say(
        {
            "phase": "ended",
            "acked": flushed(provider, exporter, 5 + 2 * LOOP_TURNS),
            "root_end_ns": end_ns,
        }
    )
    provider.shutdown()


if __name__ == "__main__":
    main()
