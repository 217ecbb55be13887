"""An MCP tool call crossing two processes: the MCP Python SDK (`mcp` 2.x) client here, its
stdio server (`mcp_weather_server.py`) in a child process, both traced by the SDK's own
OpenTelemetry support (mcp 2 has no instrumentor to install: it uses the global tracer
provider) and exporting to toolwatch over OTLP/HTTP on their own.

Usage: matrix_mcp.py --endpoint http://HOST:PORT

The application's root span names the tenant; under it the client initializes, lists the
tools, calls `get_weather` (arguments carry a secret) and `get_forecast` (which fails). The
trace crosses stdio in `params._meta`. Prints the run's trace id as JSON.
"""

import argparse
import asyncio
import json
import os
import sys

SECRET = "AKIAQX7Z3K9M2P4V8R6T"


async def calls(server_args):
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=sys.executable, args=server_args, env=dict(os.environ))
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            tools = await session.list_tools()
            assert sorted(t.name for t in tools.tools) == ["get_forecast", "get_weather"]
            ok = await session.call_tool("get_weather", {"city": "Oslo", "note": SECRET})
            assert not ok.is_error and ok.content[0].text == "4C", ok
            failed = await session.call_tool("get_forecast", {"city": "Oslo"})
            assert failed.is_error, failed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoint", required=True)
    args = ap.parse_args()
    for name in list(os.environ):
        if name.startswith("OTEL_") or name.lower().endswith("_proxy"):
            del os.environ[name]
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create({"service.name": "weather-agent"})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(
        BatchSpanProcessor(OTLPSpanExporter(endpoint=args.endpoint + "/v1/traces"))
    )
    trace.set_tracer_provider(provider)
    server = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mcp_weather_server.py")
    tracer = trace.get_tracer("weather-agent")
    with tracer.start_as_current_span("weather run", attributes={"executor.tenant_id": "acme"}) as root:
        asyncio.run(calls([server, "--endpoint", args.endpoint]))
        trace_id = format(root.get_span_context().trace_id, "032x")
    assert provider.force_flush(), "the spans were not exported"
    provider.shutdown()
    print(json.dumps({"trace_id": trace_id}))


if __name__ == "__main__":
    main()
