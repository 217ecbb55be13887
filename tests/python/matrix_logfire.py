"""One run of the OpenAI Agents SDK traced by Pydantic Logfire, exporting to toolwatch over
OTLP instead of to Logfire's service (no account, no token).

Usage: matrix_logfire.py --endpoint http://HOST:PORT [--content]

`logfire.configure(send_to_logfire=False)` with `OTEL_EXPORTER_OTLP_ENDPOINT` set sends
logfire's spans with the OpenTelemetry SDK's OTLP/HTTP exporter; logfire always captures
content (its scrubber aside). `logfire.instrument_openai_agents()` traces the SDK; the SDK's
own exporter (to api.openai.com) is removed first. The agent and its stub model are those of
matrix_openai_agents.py; the user's message carries a secret. Prints the stub's request count.
"""

import argparse
import asyncio
import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from openai_stub import OpenAIStub  # noqa: E402
from otel_setup import clear_environment  # noqa: E402

SECRET = "AKIAQX7Z3K9M2P4V8R6T"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--content", action="store_true", help="accepted; logfire always captures it")
    args = ap.parse_args()
    clear_environment("LOGFIRE_", "OPENAI_")
    os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = args.endpoint
    os.environ["OTEL_RESOURCE_ATTRIBUTES"] = "executor.tenant_id=acme"
    import logfire
    from agents import Agent, Runner, function_tool, set_default_openai_client, set_trace_processors
    from openai import AsyncOpenAI

    logfire.configure(send_to_logfire=False, service_name="weather-agent", console=False)
    set_trace_processors([])
    logfire.instrument_openai_agents()

    stub = OpenAIStub({"city": "Oslo"})
    client = AsyncOpenAI(base_url=stub.base_url, api_key="sk-local-stub", max_retries=0)
    set_default_openai_client(client, use_for_tracing=False)

    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return "4C" if city == "Oslo" else "unknown"

    agent = Agent(
        name="weather_agent",
        instructions="You answer weather questions.",
        tools=[get_weather],
        model="gpt-4o-mini",
    )
    result = asyncio.run(Runner.run(agent, f"Weather in Oslo? My AWS key is {SECRET}."))
    assert result.final_output == "It is 4 degrees in Oslo.", result.final_output
    assert logfire.force_flush(), "the spans were not exported"
    logfire.shutdown()
    stub.close()
    print(json.dumps({"stub_requests": len(stub.requests)}))


if __name__ == "__main__":
    main()
