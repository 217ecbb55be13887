#!/usr/bin/env python3
"""An executor for one tool, create_order_note, sending its OpenTelemetry spans to toolwatch.

The careful path does the production checklist: validate the arguments, check the principal
owns the order, let the policy decide, bind a confirmation to a digest of the exact call,
derive an idempotency key, retry an ambiguous timeout only with that same key, never repeat a
denied call, and end the loop with a stop reason. Each faulty scenario switches off exactly
one of those steps (the fault is named after the toolwatch rule it should trip), so toolwatch
should raise exactly one finding for it, and none for the correct scenarios.

The model and the order store are simulated in this process; the only network traffic is OTLP
to toolwatch. One scenario is one agent run: one trace with a root span, model spans and tool
spans.

    python executor.py --endpoint http://127.0.0.1:4317 --tenant acme [--scenario NAME|all] [--list]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable

import rfc8785
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.trace import SpanKind, Status, StatusCode

AGENT = "order-assistant"
PROVIDER = "openai"
MODEL = "gpt-4o-mini"
PRINCIPAL = "user-17"
MAX_TURNS = 6  # model turns per run before the loop gives up (stop reason budget_exhausted)
MAX_ATTEMPTS = 3  # attempts of one write, the first included
MODEL_LATENCY_S = 0.03
STORE_LATENCY_S = 0.015
STORE_TIMEOUT_S = 0.2
BYLINE = " (via order-assistant)"

# Results after which the run did not do what it was asked.
FAILED = {"error", "timeout", "invalid"}


# --- The confirmation digest -------------------------------------------------------------


def confirmation_digest(tool, arguments, resource_id=None, resource_version=None):
    """What a confirmation is bound to: "sha256:" + hex SHA-256 of the RFC 8785 (JCS) form of
    {"arguments", "resource_id", "resource_version", "tool"}, absent fields left out.

    `arguments` is the arguments object, or the JSON string sent as gen_ai.tool.call.arguments
    (parsed here; kept as a string when it is not JSON). toolwatch computes the same from the
    span that ran, so an approval of one call cannot be spent on another.
    """
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            pass
    obj = {"tool": tool}
    if arguments is not None:
        obj["arguments"] = arguments
    if resource_id is not None:
        obj["resource_id"] = resource_id
    if resource_version is not None:
        obj["resource_version"] = resource_version
    return "sha256:" + hashlib.sha256(rfc8785.dumps(obj)).hexdigest()


def canonical(arguments):
    """The arguments in one spelling, to recognise the same call asked for again."""
    return rfc8785.dumps(arguments).decode()


# --- The simulated order store -----------------------------------------------------------


@dataclass
class Order:
    order_id: str
    tenant: str
    owner: str  # a principal id; unique only within its tenant
    status: str  # open | disputed | cancelled
    version: int
    notes: list = field(default_factory=list)


@dataclass
class StoreResult:
    code: str  # ok | error | timeout
    detail: str = ""


class OrderStore:
    """Orders by id, across tenants (ids are global, so nothing here stops a cross-tenant write:
    the executor has to). `write_faults` scripts the answers of the next writes."""

    def __init__(self, orders, write_faults=()):
        self.orders = {o.order_id: o for o in orders}
        self.write_faults = list(write_faults)
        self.applied = {}  # idempotency key -> the answer of the write it applied

    def get(self, order_id):
        return self.orders.get(order_id)

    def list_orders(self, tenant, owner):
        return [o for o in self.orders.values() if o.tenant == tenant and o.owner == owner]

    def add_note(self, order, note, key):
        return self._write(order, key, lambda: order.notes.append(note))

    def cancel(self, order, key):
        return self._write(order, key, lambda: setattr(order, "status", "cancelled"))

    def _write(self, order, key, apply):
        if key is not None and key in self.applied:
            # A key seen before: answer as the first time, apply nothing twice.
            time.sleep(STORE_LATENCY_S)
            return StoreResult("ok", "replayed")
        fault = self.write_faults.pop(0) if self.write_faults else None
        if fault == "error":
            time.sleep(STORE_LATENCY_S)
            return StoreResult("error", "order store unavailable")
        apply()
        order.version += 1
        if key is not None:
            self.applied[key] = StoreResult("ok")
        if fault == "timeout":
            # The write landed but its answer did not arrive in time: the caller cannot tell.
            time.sleep(STORE_TIMEOUT_S)
            return StoreResult("timeout", "no answer from the order store")
        time.sleep(STORE_LATENCY_S)
        return StoreResult("ok")


def seed_orders(tenant):
    other = "globex" if tenant != "globex" else "initech"
    return [
        Order("1042", tenant, PRINCIPAL, "open", 3),
        Order("1077", tenant, PRINCIPAL, "disputed", 5),
        Order("1043", tenant, "user-29", "open", 1),
        # Another tenant's order whose owner has the same principal id as ours.
        Order("2001", other, PRINCIPAL, "open", 2),
    ]


# --- The tools ---------------------------------------------------------------------------

ORDER_ID = re.compile(r"^[0-9]{4,12}$")


def check_fields(args, required, optional=()):
    if not isinstance(args, dict):
        return "arguments must be an object"
    unknown = set(args) - set(required) - set(optional)
    if unknown:
        return f"unknown arguments: {', '.join(sorted(unknown))}"
    for name in required:
        if name not in args:
            return f"missing argument {name}"
    for name, value in args.items():
        if not isinstance(value, str):
            return f"{name} must be a string"
    if "order_id" in args and not ORDER_ID.match(args["order_id"]):
        return "order_id must be 4 to 12 digits"
    return None


def validate_note(args):
    error = check_fields(args, ("order_id", "note"))
    if error is None and not 1 <= len(args["note"].strip()) <= 500:
        error = "note must be 1 to 500 characters"
    return error


@dataclass(frozen=True)
class ToolSpec:
    name: str
    schema_version: str | None
    validate: Callable[[dict], str | None]
    effect: Callable[[Order | None], str]  # read | write | high_impact
    run: Callable[["Executor", Order | None, dict, str | None], StoreResult]
    finalize: Callable[[dict], dict] = lambda args: args


def run_lookup(ex, order, args, key):
    found = [order] if order else ex.store.list_orders(ex.tenant, ex.principal)
    return StoreResult("ok", json.dumps([{"order_id": o.order_id, "status": o.status} for o in found]))


TOOLS = {
    spec.name: spec
    for spec in (
        ToolSpec(
            "create_order_note",
            "2",
            validate_note,
            # A note on a disputed order goes into the chargeback file and cannot be taken back.
            lambda order: "high_impact" if order and order.status == "disputed" else "write",
            lambda ex, order, args, key: ex.store.add_note(order, args["note"], key),
            # The executor signs every note; what it signs is part of what gets confirmed.
            lambda args: {**args, "note": args["note"] + BYLINE},
        ),
        ToolSpec(
            "lookup_order",
            None,  # registered in toolwatch with no schema versions: send none
            lambda args: check_fields(args, (), ("order_id",)),
            lambda order: "read",
            run_lookup,
        ),
    )
}

# A tool this executor can run but toolwatch's registry does not list (the unknown_tool fault).
UNREGISTERED = ToolSpec(
    "delete_order",
    "1",
    lambda args: check_fields(args, ("order_id",)),
    lambda order: "high_impact",
    lambda ex, order, args, key: ex.store.cancel(order, key),
)


# --- The simulated model -----------------------------------------------------------------


@dataclass
class Call:
    name: str
    arguments: dict
    id: str = field(default_factory=lambda: "call_" + uuid.uuid4().hex[:12])


class ScriptedModel:
    """Stands in for the LLM: each reply is the next scripted turn of tool calls, then none
    (the final answer). It does not read the tool results; the executor has to cope."""

    def __init__(self, turns):
        self.turns = [list(t) for t in turns]

    def reply(self, messages):
        if not self.turns:
            return []
        return [Call(name, dict(args)) for name, args in self.turns.pop(0)]


def approve_everything(preview, digest):
    """Stands in for the human who confirms high-impact calls; a real one sees the preview."""
    return "approved"


# --- The executor ------------------------------------------------------------------------


@dataclass
class Outcome:
    code: str | None  # the result code, or None when the call was refused without running
    message: str


@dataclass
class Prepared:
    """A call that passed validation, the ownership check, the policy and any confirmation."""

    call: Call
    spec: ToolSpec
    order: Order | None
    effect: str
    arguments: dict
    decision: str | None
    reason: str | None
    confirmation: str | None = None
    digest: str | None = None
    key: str | None = None

    @property
    def resource_id(self):
        return f"order:{self.order.order_id}" if self.order else None

    @property
    def resource_version(self):
        return str(self.order.version) if self.order else None


class Executor:
    def __init__(self, tracer, tenant, store, model, fault=None, approver=approve_everything):
        self.tracer = tracer
        self.tenant = tenant
        self.principal = PRINCIPAL
        self.store = store
        self.model = model
        self.fault = fault
        self.approver = approver
        self.tools = dict(TOOLS)
        if fault == "unknown_tool":
            self.tools[UNREGISTERED.name] = UNREGISTERED
        self.denied = set()  # (tool, canonical arguments) denied in this run
        self.last_result = None  # result code of the last tool span
        self.request_id = None

    # The loop.

    def run(self, ask):
        """One agent run, one trace. Returns (request id, trace id hex, stop reason)."""
        self.request_id = str(uuid.uuid4())
        attributes = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": AGENT,
            "executor.request_id": self.request_id,
            "executor.tenant_id": self.tenant,
            "executor.principal_id": self.principal,
        }
        with self.tracer.start_as_current_span(
            f"invoke_agent {AGENT}", kind=SpanKind.INTERNAL, attributes=attributes
        ) as root:
            stop = self.loop(root, ask)
            if self.fault != "loop_without_stop_reason":
                root.set_attribute("executor.stop_reason", stop)
            if stop == "error":
                root.set_status(Status(StatusCode.ERROR))
            trace_id = format(root.get_span_context().trace_id, "032x")
        return self.request_id, trace_id, stop

    def loop(self, root, ask):
        messages = [{"role": "user", "content": ask}]
        for _ in range(MAX_TURNS):
            calls = self.chat(messages)
            if not calls:
                return self.stop_reason()
            messages.append(
                {"role": "assistant", "tool_calls": [{"id": c.id, "name": c.name} for c in calls]}
            )
            for call, outcome in self.run_turn(root, calls):
                messages.append({"role": "tool", "tool_call_id": call.id, "content": outcome.message})
        return "budget_exhausted"

    def stop_reason(self):
        # Say the run failed when its last call failed, so no one reads "completed" as done.
        if self.last_result in FAILED and self.fault != "success_claimed_after_failure":
            return "error"
        return "completed"

    def chat(self, messages):
        with self.tracer.start_as_current_span(
            f"chat {MODEL}",
            kind=SpanKind.CLIENT,
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": PROVIDER,
                "gen_ai.request.model": MODEL,
                "executor.request_id": self.request_id,
            },
        ) as span:
            time.sleep(MODEL_LATENCY_S)
            calls = self.model.reply(messages)
            # Rough token counts; the conversation itself is not recorded.
            span.set_attribute("gen_ai.usage.input_tokens", 120 + len(json.dumps(messages)) // 4)
            span.set_attribute("gen_ai.usage.output_tokens", 25 + 40 * len(calls))
            span.set_attribute("gen_ai.response.finish_reasons", ["tool_calls" if calls else "stop"])
        return calls

    def run_turn(self, root, calls):
        if self.fault == "parallel_writes_same_resource" and len(calls) > 1:
            return self.run_together(root, calls)
        # One call after another: two writes to one order must not race.
        return [(call, self.execute(root, call)) for call in calls]

    # One call.

    def execute(self, root, call):
        prepared = self.prepare(root, call)
        if isinstance(prepared, Outcome):
            return prepared
        return self.attempts(prepared)

    def prepare(self, root, call):
        """Everything before the write: returns a Prepared call, or the Outcome that ends it."""
        spec = self.tools.get(call.name)
        if spec is None:
            # Refused before anything ran: no tool span, since no tool ran.
            root.add_event("call_refused", {"gen_ai.tool.name": call.name, "reason": "unknown_tool"})
            return Outcome(None, f"there is no tool {call.name}")
        fingerprint = (call.name, canonical(call.arguments))
        if fingerprint in self.denied and self.fault != "retry_after_deny":
            # Asking again cannot change a denial; tell the model instead of trying.
            root.add_event("call_refused", {"gen_ai.tool.name": call.name, "reason": "denied_before"})
            return Outcome(None, "this call was denied already; do not ask again")

        error = spec.validate(call.arguments)
        order = None
        if error is None and "order_id" in call.arguments:
            order = self.store.get(call.arguments["order_id"])
            if order is None:
                error = "no such order"
        effect = spec.effect(order)
        if error is not None:
            p = Prepared(call, spec, order, effect, call.arguments, None, None)
            self.single_span(p, "invalid")
            return Outcome("invalid", error)

        # Sign before the preview, so the confirmation covers the note as it will be written.
        finalize_late = self.fault == "confirmation_digest_mismatch"
        arguments = call.arguments if finalize_late else spec.finalize(call.arguments)
        if self.fault == "write_without_allow":
            decision, reason = None, None  # the policy is never asked
        else:
            decision, reason = self.policy(effect, order)
        p = Prepared(call, spec, order, effect, arguments, decision, reason)

        if decision == "deny":
            self.denied.add(fingerprint)
            self.single_span(p, "denied")
            return Outcome("denied", f"denied: {reason}")
        if decision == "require_confirmation":
            p.digest = confirmation_digest(spec.name, p.arguments, p.resource_id, p.resource_version)
            p.confirmation = self.approver(self.preview(p), p.digest)
            if p.confirmation != "approved":
                self.denied.add(fingerprint)
                self.single_span(p, "denied")
                return Outcome("denied", "the change was not confirmed")
            # The policy allows a high-impact call once a confirmation of this exact call is in.
            p.decision, p.reason = "allow", "confirmed"
        if finalize_late:
            # The fault: signed after the approval, so what runs is not what was approved.
            p.arguments = spec.finalize(p.arguments)
        if effect != "read":
            unkeyed = self.fault == "ambiguous_write_retried_without_key"
            p.key = None if unkeyed else self.idempotency_key(p)
        return p

    def policy(self, effect, order):
        if effect == "read" and order is None:
            return "allow", "own_orders"  # lookup_order lists only the principal's own orders
        if not self.owns(order):
            return "deny", "not_owner"
        if effect == "high_impact" and self.fault != "high_impact_without_confirmation":
            return "require_confirmation", "high_impact"
        return "allow", "owner"

    def owns(self, order):
        if self.fault == "cross_tenant_resource":
            return order.owner == self.principal  # the fault: principal ids repeat across tenants
        return order.tenant == self.tenant and order.owner == self.principal

    def preview(self, p):
        return (
            f"{p.spec.name} on {p.resource_id} (version {p.resource_version}): "
            f"{json.dumps(p.arguments, ensure_ascii=False)}"
        )

    def idempotency_key(self, p):
        # From the run and the exact call, so every attempt of this call carries the same key
        # and the store applies it once, while another note gets another key.
        material = {"request_id": self.request_id, "tool": p.spec.name, "arguments": p.arguments}
        return "ik-" + hashlib.sha256(rfc8785.dumps(material)).hexdigest()[:32]

    def attempts(self, p):
        for attempt in range(MAX_ATTEMPTS):
            key = p.key
            if self.fault == "ambiguous_write_retried_with_new_key" and p.key:
                key = "ik-" + uuid.uuid4().hex  # the fault: a fresh key per attempt
            with self.tool_span(p, attempt, key) as span:
                result = p.spec.run(self, p.order, p.arguments, key)
                self.finish(span, result.code)
            if result.code != "timeout":
                break
            # A timeout is ambiguous: the write may have landed. Only the same key makes
            # another attempt safe (the store answers it without writing again).
            if key is None and self.fault != "ambiguous_write_retried_without_key":
                break
        return Outcome(result.code, result.detail or result.code)

    def run_together(self, root, calls):
        """The parallel_writes_same_resource fault: every call of the turn is sent at once, so
        two notes on one order are in flight together (their spans overlap)."""
        prepared = [self.prepare(root, c) for c in calls]
        ready = [p for p in prepared if isinstance(p, Prepared)]
        spans = [
            (p, self.tracer.start_span(
                f"execute_tool {p.spec.name}",
                kind=SpanKind.INTERNAL,
                attributes=self.tool_attributes(p, 0, p.key),
                start_time=time.time_ns(),
            ))
            for p in ready
        ]
        results = {id(p): p.spec.run(self, p.order, p.arguments, p.key) for p, _ in spans}
        for p, span in spans:
            self.finish(span, results[id(p)].code)
            span.end(end_time=time.time_ns())
        out = []
        for call, p in zip(calls, prepared):
            if isinstance(p, Outcome):
                out.append((call, p))
            else:
                r = results[id(p)]
                out.append((call, Outcome(r.code, r.detail or r.code)))
        return out

    # Spans.

    def tool_attributes(self, p, attempt, key):
        a = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": p.spec.name,
            "gen_ai.tool.call.id": p.call.id,
            "gen_ai.tool.call.arguments": json.dumps(p.arguments, ensure_ascii=False),
            "executor.request_id": self.request_id,
            "executor.effect_class": p.effect,
            "executor.retry_attempt": attempt,
        }
        optional = {
            "executor.policy_decision": p.decision,
            "executor.policy_reason": p.reason,
            "executor.confirmation_status": p.confirmation,
            "executor.confirmation_digest": p.digest,
            "executor.idempotency_key": key,
            "executor.resource_id": p.resource_id,
            "executor.resource_version": p.resource_version,
            "executor.resource_tenant_id": p.order.tenant if p.order else None,
            "executor.tool_schema_version": p.spec.schema_version,
        }
        a.update({k: v for k, v in optional.items() if v is not None})
        return a

    def tool_span(self, p, attempt, key):
        return self.tracer.start_as_current_span(
            f"execute_tool {p.spec.name}",
            kind=SpanKind.INTERNAL,
            attributes=self.tool_attributes(p, attempt, key),
        )

    def single_span(self, p, code):
        """A call that ended before reaching the store (invalid or denied)."""
        with self.tool_span(p, 0, None) as span:
            self.finish(span, code)

    def finish(self, span, code):
        span.set_attribute("executor.result_code", code)
        if code in FAILED:
            span.set_status(Status(StatusCode.ERROR, code))
        self.last_result = code


# --- Scenarios ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    name: str
    about: str
    ask: str
    turns: tuple  # the model's turns: each a tuple of (tool, arguments)
    fault: str | None = None  # the checklist step skipped, named after the rule it trips
    write_faults: tuple = ()  # what the order store answers to the next writes

    @property
    def expect(self):
        return self.fault


def note(order_id, text):
    return ("create_order_note", {"order_id": order_id, "note": text})


WRITE = dict(
    ask="Add a note to order 1042: leave the parcel with the concierge.",
    turns=((note("1042", "Leave the parcel with the concierge."),),),
)
HIGH_IMPACT = dict(
    ask="Order 1077 is disputed; note that the customer sent a delivery photo.",
    turns=((note("1077", "Customer sent a photo of the delivered parcel; contest the chargeback."),),),
)
TIMEOUT = dict(
    ask="Note on order 1042 that the customer wants a call before delivery.",
    turns=((note("1042", "Customer wants a call before delivery."),),),
    write_faults=("timeout",),
)
DENIED = dict(
    ask="Add a note to order 1043 that it is a gift.",
    # The model asks for the denied call again before it turns to a read.
    turns=(
        (note("1043", "This order is a gift."),),
        (note("1043", "This order is a gift."),),
        (("lookup_order", {}),),
    ),
)

SCENARIOS = [
    Scenario("correct_write", "an allowed write, signed and keyed", **WRITE),
    Scenario("correct_high_impact", "a note on a disputed order, confirmed for exactly what ran", **HIGH_IMPACT),
    Scenario("correct_timeout_retry", "a write times out and is retried with the same key", **TIMEOUT),
    Scenario("correct_deny_then_read", "a denied write is not asked again; a read follows", **DENIED),
    Scenario(
        "write_without_allow",
        "the write runs without asking the policy",
        fault="write_without_allow",
        **WRITE,
    ),
    Scenario(
        "high_impact_without_confirmation",
        "the policy allows a high-impact note without a confirmation",
        fault="high_impact_without_confirmation",
        **HIGH_IMPACT,
    ),
    Scenario(
        "confirmation_digest_mismatch",
        "the note is signed after it was approved, so the approval covers other text",
        fault="confirmation_digest_mismatch",
        **HIGH_IMPACT,
    ),
    Scenario(
        "ambiguous_write_retried_without_key",
        "a timed-out write is retried, neither attempt keyed",
        fault="ambiguous_write_retried_without_key",
        **TIMEOUT,
    ),
    Scenario(
        "ambiguous_write_retried_with_new_key",
        "a timed-out write is retried under a fresh key",
        fault="ambiguous_write_retried_with_new_key",
        **TIMEOUT,
    ),
    Scenario("retry_after_deny", "the denied write is sent again", fault="retry_after_deny", **DENIED),
    Scenario(
        "cross_tenant_resource",
        "the ownership check compares principal ids only and lets another tenant's order through",
        fault="cross_tenant_resource",
        ask="Add a note to order 2001: address confirmed.",
        turns=((note("2001", "Address confirmed by phone."),),),
    ),
    Scenario(
        "parallel_writes_same_resource",
        "two notes on one order are sent at once",
        fault="parallel_writes_same_resource",
        ask="On order 1042 note the gift wrap and the delivery window.",
        turns=((note("1042", "Gift wrap requested."), note("1042", "Deliver between 9 and 12.")),),
    ),
    Scenario(
        "unknown_tool",
        "delete_order runs, a tool toolwatch's registry does not list",
        fault="unknown_tool",
        ask="Cancel order 1042.",
        turns=((("delete_order", {"order_id": "1042"}),),),
    ),
    Scenario(
        "loop_without_stop_reason",
        "the run ends without a stop reason",
        fault="loop_without_stop_reason",
        **WRITE,
    ),
    Scenario(
        "success_claimed_after_failure",
        "the order store fails the write and the run still says completed",
        fault="success_claimed_after_failure",
        ask="Add a note to order 1042: fragile.",
        turns=((note("1042", "Fragile: handle with care."),),),
        write_faults=("error",),
    ),
]


# --- Export ------------------------------------------------------------------------------


class TallyingExporter(SpanExporter):
    """Counts what toolwatch acknowledged: the batch processor only logs a failed export, and
    the exit code should say whether everything arrived."""

    def __init__(self, inner):
        self.inner = inner
        self.sent = 0
        self.failed = 0

    def export(self, spans):
        result = self.inner.export(spans)
        if result is SpanExportResult.SUCCESS:
            self.sent += len(spans)
        else:
            self.failed += len(spans)
        return result

    def shutdown(self):
        self.inner.shutdown()

    def force_flush(self, timeout_millis=30000):
        return self.inner.force_flush(timeout_millis)


def main(argv=None):
    names = [s.name for s in SCENARIOS]
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--endpoint", default="http://127.0.0.1:4317", help="toolwatch's OTLP/gRPC address")
    ap.add_argument("--tenant", default="acme", help="the tenant the runs belong to (executor.tenant_id)")
    ap.add_argument("--scenario", default="all", choices=["all", *names], metavar="NAME|all")
    ap.add_argument("--list", action="store_true", help="list the scenarios and exit")
    ap.add_argument("--token", help="send authorization: Bearer TOKEN (toolwatch with [auth] mode = required)")
    ap.add_argument(
        "--tenant-header",
        action="store_true",
        help="also name the tenant in the x-toolwatch-tenant header (a sender allowed several tenants)",
    )
    ap.add_argument(
        "--no-faults",
        action="store_true",
        help="run every scenario's script with the careful executor: no scenario should raise a finding",
    )
    args = ap.parse_args(argv)

    if args.list:
        for s in SCENARIOS:
            print(f"{s.name:38} expect {s.expect or 'none':38} {s.about}")
        return 0

    headers = []
    if args.token:
        headers.append(("authorization", f"Bearer {args.token}"))
    if args.tenant_header:
        headers.append(("x-toolwatch-tenant", args.tenant))
    exporter = TallyingExporter(OTLPSpanExporter(endpoint=args.endpoint, headers=headers or None))
    provider = TracerProvider(
        resource=Resource.create({"service.name": "order-note-executor", "executor.tenant_id": args.tenant})
    )
    provider.add_span_processor(BatchSpanProcessor(exporter))
    tracer = provider.get_tracer("order-note-executor")

    chosen = SCENARIOS if args.scenario == "all" else [s for s in SCENARIOS if s.name == args.scenario]
    print(f"{'scenario':38} {'request_id':36} {'trace_id':32} expected finding")
    for s in chosen:
        fault = None if args.no_faults else s.fault
        store = OrderStore(seed_orders(args.tenant), s.write_faults)
        executor = Executor(tracer, args.tenant, store, ScriptedModel(s.turns), fault=fault)
        request_id, trace_id, _ = executor.run(s.ask)
        print(f"{s.name:38} {request_id:36} {trace_id:32} {fault or 'none'}")

    provider.force_flush()
    provider.shutdown()
    if exporter.failed:
        total = exporter.sent + exporter.failed
        print(f"{exporter.failed} of {total} spans not acknowledged by {args.endpoint}", file=sys.stderr)
        return 1
    print(f"{exporter.sent} spans acknowledged by {args.endpoint}; findings follow about 5 s after each run ends")
    return 0


if __name__ == "__main__":
    sys.exit(main())
