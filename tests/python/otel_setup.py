"""What the compatibility matrix's scripts share: clear inherited settings before the library
under test is imported, then export its spans with the OpenTelemetry SDK over OTLP/HTTP to the
toolwatch under test."""

import os


def clear_environment(*prefixes):
    """Delete inherited OTEL_* variables, those with the given prefixes and every proxy
    setting, so the shell that runs the tests cannot change what is exported or where."""
    for name in list(os.environ):
        if name.startswith(("OTEL_",) + prefixes) or name.lower().endswith("_proxy"):
            del os.environ[name]


def tracer_provider(endpoint, attributes):
    """An SDK tracer provider with a batch exporter to `endpoint`/v1/traces, the resource made
    of `attributes`, set as the global provider. Imported here, after the environment is set."""
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create(attributes))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint + "/v1/traces")))
    trace.set_tracer_provider(provider)
    return provider
