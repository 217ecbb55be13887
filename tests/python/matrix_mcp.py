"""An MCP tool call crossing two processes: the MCP Python SDK client here, its stdio server
(`mcp_weather_server.py`) in a child process, each exporting to toolwatch over OTLP/HTTP on
its own.

Usage: matrix_mcp.py --endpoint http://HOST:PORT [--openllmetry]

  (default)      `mcp` 2.x traces itself: no instrumentor, the global tracer provider
  --openllmetry  `mcp` 1.x (the .venv-mcp1 venv) with OpenLLMetry's
                 opentelemetry-instrumentation-mcp in both processes (content on, its default)

The application's root span names the tenant; under it the client initializes, lists the
tools, calls `get_weather` (arguments carry a secret) and `get_forecast` (which fails). The
trace crosses stdio in `params._meta`. Prints the run's trace id as JSON.
"""

import argparse
import asyncio
import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from otel_setup import clear_environment, tracer_provider  # noqa: E402

SECRET = "AKIAQX7Z3K9M2P4V8R6T"


def is_error(result):
    """A tool result's error flag (`isError` in mcp 1.x, `is_error` in 2.x)."""
    return result.is_error if hasattr(result, "is_error") else result.isError


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
            assert not is_error(ok) and ok.content[0].text == "4C", ok
            failed = await session.call_tool("get_forecast", {"city": "Oslo"})
            assert is_error(failed), failed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--openllmetry", action="store_true")
    args = ap.parse_args()
    clear_environment("TRACELOOP_")
    from opentelemetry import trace

    provider = tracer_provider(args.endpoint, {"service.name": "weather-agent"})
    server = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mcp_weather_server.py")
    server_args = [server, "--endpoint", args.endpoint]
    if args.openllmetry:
        from opentelemetry.instrumentation.mcp import McpInstrumentor

        McpInstrumentor().instrument()
        server_args.append("--openllmetry")
    tracer = trace.get_tracer("weather-agent")
    with tracer.start_as_current_span("weather run", attributes={"executor.tenant_id": "acme"}) as root:
        asyncio.run(calls(server_args))
        trace_id = format(root.get_span_context().trace_id, "032x")
    assert provider.force_flush(), "the spans were not exported"
    provider.shutdown()
    print(json.dumps({"trace_id": trace_id}))


if __name__ == "__main__":
    main()
