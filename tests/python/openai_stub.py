"""An OpenAI-compatible server for the compatibility-matrix tests, in a thread of the caller.

It answers chat completions (`POST /v1/chat/completions`) and the Responses API
(`POST /v1/responses`), neither streamed, with a scripted agent turn: while the conversation
holds no tool result, one call of the tool `get_weather` with the arguments the caller
scripted; then a final answer. Token usage is fixed per turn so the
tests can assert exact sums. Every response has an id of its own (some instrumentations key
spans by it).
"""

import itertools
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# Usage per turn: (prompt, completion, cached prompt tokens).
TOOL_TURN_USAGE = (11, 7, 3)
FINAL_TURN_USAGE = (20, 9, 0)
TOOL_CALL_ID = "call_weather_1"
FINAL_TEXT = "It is 4 degrees in Oslo."


def _usage(prompt, completion, cached):
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
        "completion_tokens_details": {"reasoning_tokens": 0},
    }


class OpenAIStub:
    """Serves on 127.0.0.1 (a free port) until `close`; `base_url` is what clients take."""

    def __init__(self, tool_arguments):
        self.tool_arguments = tool_arguments
        self.requests = []
        ids = itertools.count(1)
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                stub.requests.append((self.path, body))
                if self.path == "/v1/chat/completions":
                    answer = stub.chat(body, next(ids))
                elif self.path == "/v1/responses":
                    answer = stub.response(body, next(ids))
                else:
                    self.send_error(404)
                    return
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def chat(self, body, n):
        answered = any(m.get("role") == "tool" for m in body.get("messages", []))
        if answered:
            message = {"role": "assistant", "content": FINAL_TEXT}
            finish, usage = "stop", FINAL_TURN_USAGE
        else:
            call = {
                "id": TOOL_CALL_ID,
                "type": "function",
                "function": {"name": "get_weather", "arguments": json.dumps(self.tool_arguments)},
            }
            message = {"role": "assistant", "content": None, "tool_calls": [call]}
            finish, usage = "tool_calls", TOOL_TURN_USAGE
        return {
            "id": f"chatcmpl-stub-{n}",
            "object": "chat.completion",
            "created": 1767225600,
            "model": body["model"] + "-2026-01-01",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": _usage(*usage),
        }

    def response(self, body, n):
        """A Responses API answer: a `function_call` item, or a `message` once the input holds
        the call's `function_call_output`."""
        items = body["input"] if isinstance(body.get("input"), list) else []
        answered = any(i.get("type") == "function_call_output" for i in items if isinstance(i, dict))
        if answered:
            text = {"type": "output_text", "text": FINAL_TEXT, "annotations": []}
            output = [
                {
                    "type": "message",
                    "id": f"msg_stub_{n}",
                    "role": "assistant",
                    "status": "completed",
                    "content": [text],
                }
            ]
            usage = FINAL_TURN_USAGE
        else:
            output = [
                {
                    "type": "function_call",
                    "id": f"fc_stub_{n}",
                    "call_id": TOOL_CALL_ID,
                    "name": "get_weather",
                    "arguments": json.dumps(self.tool_arguments),
                    "status": "completed",
                }
            ]
            usage = TOOL_TURN_USAGE
        prompt, completion, cached = usage
        return {
            "id": f"resp_stub_{n}",
            "object": "response",
            "created_at": 1767225600,
            "status": "completed",
            "model": body["model"] + "-2026-01-01",
            "output": output,
            "usage": {
                "input_tokens": prompt,
                "input_tokens_details": {"cached_tokens": cached},
                "output_tokens": completion,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": prompt + completion,
            },
            "parallel_tool_calls": True,
            "tool_choice": body.get("tool_choice", "auto"),
            "tools": body.get("tools", []),
            "text": {"format": {"type": "text"}},
            "error": None,
            "incomplete_details": None,
            "instructions": body.get("instructions"),
            "metadata": {},
        }

    def close(self):
        self.server.shutdown()
        self.server.server_close()
