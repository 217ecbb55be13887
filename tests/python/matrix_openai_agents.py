"""One run of the OpenAI Agents SDK (`openai-agents`) traced by OpenInference's
`openinference-instrumentation-openai-agents`, as shipped.

Usage: matrix_openai_agents.py --endpoint http://HOST:PORT [--content]

The agent `weather_agent` has one function tool, `get_weather`; its model is the local stub
(openai_stub.py) over the Responses API, the SDK's default: a turn that calls the tool, the
tool run by the SDK, a turn that answers. OpenInference's processor replaces the SDK's own
trace exporter (nothing goes to api.openai.com) and turns the SDK's trace into OpenTelemetry
spans, exported to toolwatch over OTLP/HTTP by the SDK's exporter. The application adds no
span of its own. Content is captured unless OPENINFERENCE_HIDE_* say otherwise (set without
--content). The user's message carries a secret. Prints the stub's request count as JSON.
"""

import argparse
import asyncio
import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from openai_stub import OpenAIStub  # noqa: E402
from otel_setup import clear_environment, tracer_provider  # noqa: E402

SECRET = "AKIAQX7Z3K9M2P4V8R6T"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--content", action="store_true")
    args = ap.parse_args()
    clear_environment("OPENINFERENCE_", "OPENAI_")
    for part in ["INPUTS", "OUTPUTS", "INPUT_MESSAGES", "OUTPUT_MESSAGES"]:
        os.environ["OPENINFERENCE_HIDE_" + part] = "false" if args.content else "true"
    from openai import AsyncOpenAI
    from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    provider = tracer_provider(
        args.endpoint, {"service.name": "weather-agent", "executor.tenant_id": "acme"}
    )
    OpenAIAgentsInstrumentor().instrument(tracer_provider=provider)

    from agents import Agent, Runner, function_tool, set_default_openai_client

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
    prompt = f"Weather in Oslo? My AWS key is {SECRET}."
    result = asyncio.run(Runner.run(agent, prompt))
    assert result.final_output == "It is 4 degrees in Oslo.", result.final_output
    assert provider.force_flush(), "the spans were not exported"
    provider.shutdown()
    stub.close()
    print(json.dumps({"stub_requests": len(stub.requests)}))


if __name__ == "__main__":
    main()
