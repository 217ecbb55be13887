"""A stdio MCP server (the MCP Python SDK) with two tools, for the matrix's MCP rows.

Usage: mcp_weather_server.py --endpoint http://HOST:PORT [--openllmetry]

`get_weather` answers; `get_forecast` fails (the SDK answers `isError`). With `mcp` 2.x the
SDK traces each request it serves on its own (the global tracer provider, set here); with
`mcp` 1.x and --openllmetry, OpenLLMetry's `opentelemetry-instrumentation-mcp` does. Either
continues the client's trace from the request's `params._meta`; the spans go to toolwatch
over OTLP/HTTP from this process. The resource names no tenant: the request's tenant is named
where it entered, in the client's process.
"""

import argparse
import logging
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from otel_setup import tracer_provider  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--openllmetry", action="store_true")
    args = ap.parse_args()
    # The SDK logs the failing tool's traceback; the test wants the span, not the noise.
    logging.disable(logging.CRITICAL)
    provider = tracer_provider(args.endpoint, {"service.name": "weather-mcp"})
    if args.openllmetry:
        from opentelemetry.instrumentation.mcp import McpInstrumentor

        McpInstrumentor().instrument()
    try:
        from mcp.server.mcpserver import MCPServer
    except ModuleNotFoundError:  # mcp 1.x
        from mcp.server.fastmcp import FastMCP as MCPServer

    server = MCPServer("weather")

    @server.tool()
    def get_weather(city: str, note: str = "") -> str:
        """The weather in a city."""
        return "4C" if city == "Oslo" else "unknown"

    @server.tool()
    def get_forecast(city: str) -> str:
        """A forecast; its backend is down."""
        raise RuntimeError("forecast backend down")

    try:
        server.run("stdio")
    finally:
        provider.force_flush()
        provider.shutdown()


if __name__ == "__main__":
    os.environ.pop("OTEL_SDK_DISABLED", None)
    main()
