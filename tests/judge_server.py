"""A local OpenAI-compatible chat-completions server for the judge tests (127.0.0.1 only).

It grades deterministically by term overlap between the query and the document it finds
*inside the tags the system message names*, so a verdict can only come from the document
as wrapped by the judge. It records every request (for retry counts, concurrency, usage and
the injection checks) and injects faults on demand:

- ``server.script``: responses for the next requests, in order: ``"429:SECONDS"``,
  ``"500"``, ``"401"``, ``"hang"``, ``"malformed"``, ``"refuse"``, ``"length"``, ``"schema"``;
- a document containing ``[[fault]]`` (``[[500]]``, ``[[hang]]``, ``[[refuse]]`` ...) gets
  that fault on every request;
- ``server.api_key``: requests without ``Authorization: Bearer <key>`` get 401;
- ``server.reject_json_schema``: ``response_format`` of type json_schema gets a 400, as on
  servers without structured outputs.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

STOP = {"the", "a", "an", "of", "on", "in", "for", "to", "and", "is", "are", "what", "how"}


def terms(text: str) -> set[str]:
    return {t for t in re.findall(r"[a-z0-9]+", text.lower()) if len(t) > 1 and t not in STOP}


def overlap(query: str, document: str) -> float:
    wanted = terms(query)
    return len(wanted & terms(document)) / len(wanted) if wanted else 0.0


@dataclass
class Seen:
    """What one request carried, as the server understood it."""

    system: str
    user: str
    tag: str | None
    query: str | None
    document: str | None
    response_format: str | None
    authorized: bool
    outside_tags: str = ""  # the user message with every tagged section removed


@dataclass
class JudgeServer:
    latency: float = 0.0
    api_key: str | None = None
    reject_json_schema: bool = False
    graded: bool = False
    script: list[str] = field(default_factory=list)
    requests: list[Seen] = field(default_factory=list)
    files: dict[str, bytes] = field(default_factory=dict)
    batches: dict[str, dict[str, Any]] = field(default_factory=dict)
    in_flight: int = 0
    max_in_flight: int = 0
    port: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _release: threading.Event = field(default_factory=threading.Event)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def answer(self, seen: Seen) -> dict[str, Any]:
        """The verdict this server gives: term overlap of query and document."""
        score = overlap(seen.query or "", seen.document or "")
        if seen.system.find("grade: 0, 1, 2 or 3") >= 0:
            return {"grade": round(score * 3), "reason": f"{score:.0%} of the query terms"}
        return {
            "on_topic": score >= 0.5,
            "score": round(score, 3),
            "reason": f"{score:.0%} of the query terms appear",
        }


def _parse(body: dict[str, Any], authorization: str | None, key: str | None) -> Seen:
    messages = body.get("messages", [])
    system = next((m["content"] for m in messages if m["role"] == "system"), "")
    user = next((m["content"] for m in messages if m["role"] == "user"), "")
    found = re.search(r"<(doc-[0-9a-f]+)>", system)
    tag = found.group(1) if found else None
    query = document = None
    outside = user
    if tag is not None:
        q = re.search(rf"<{tag}-query>\n(.*?)\n</{tag}-query>", user, re.S)
        d = re.search(rf"<{tag}>\n(.*?)\n</{tag}>", user, re.S)
        query = q.group(1) if q else None
        document = d.group(1) if d else None
        outside = re.sub(rf"<{tag}(-\w+)?>.*?</{tag}(-\w+)?>", "", user, flags=re.S)
    fmt = (body.get("response_format") or {}).get("type")
    authorized = key is None or authorization == f"Bearer {key}"
    return Seen(system, user, tag, query, document, fmt, authorized, outside)


def _completion(content: str | None, finish: str = "stop", refusal: str | None = None) -> bytes:
    body = {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": "judge-test",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content, "refusal": refusal},
                "finish_reason": finish,
            }
        ],
        "usage": {
            "prompt_tokens": 100,
            "completion_tokens": 20,
            "total_tokens": 120,
        },
    }
    return json.dumps(body).encode()


class _Handler(BaseHTTPRequestHandler):
    server_state: JudgeServer
    disable_nagle_algorithm = True
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def _error(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        body = json.dumps({"error": {"message": message, "type": "test", "code": None}})
        self._send(status, body.encode(), headers)

    def do_GET(self) -> None:
        """``/stats`` for benchmarks; the Batch API's batch status and file contents."""
        state = self.server_state
        if self.path == "/stats":
            with state._lock:
                stats = {"requests": len(state.requests), "max_in_flight": state.max_in_flight}
            return self._send(200, json.dumps(stats).encode())
        batch = re.fullmatch(r"/v1/batches/([\w-]+)", self.path)
        if batch and batch.group(1) in state.batches:
            return self._send(200, json.dumps(state.batches[batch.group(1)]).encode())
        content = re.fullmatch(r"/v1/files/([\w-]+)/content", self.path)
        if content and content.group(1) in state.files:
            return self._send(200, state.files[content.group(1)])
        return self._error(404, f"no {self.path}")

    def _upload(self, raw: bytes) -> None:
        """``POST /v1/files`` (multipart): keep the JSONL for a batch."""
        from email.parser import BytesParser
        from email.policy import HTTP

        header = f"Content-Type: {self.headers['Content-Type']}\r\n\r\n".encode()
        message = BytesParser(policy=HTTP).parsebytes(header + raw)
        data = b""
        for part in message.iter_parts():
            if part.get_param("name", header="content-disposition") == "file":
                data = part.get_payload(decode=True) or b""
        state = self.server_state
        file_id = f"file-{len(state.files) + 1}"
        state.files[file_id] = data
        info = {
            "id": file_id,
            "object": "file",
            "bytes": len(data),
            "created_at": 0,
            "filename": "judge-batch.jsonl",
            "purpose": "batch",
            "status": "processed",
        }
        self._send(200, json.dumps(info).encode())

    def _batch(self, body: dict[str, Any]) -> None:
        """``POST /v1/batches``: grade every request of the input file at once."""
        state = self.server_state
        lines = []
        for line in state.files[body["input_file_id"]].decode().splitlines():
            request = json.loads(line)
            seen = _parse(request["body"], None, None)
            answer = json.dumps(state.answer(seen))
            completion = json.loads(_completion(answer))
            lines.append(
                json.dumps(
                    {
                        "custom_id": request["custom_id"],
                        "response": {"status_code": 200, "body": completion},
                    }
                )
            )
        output_id = f"file-{len(state.files) + 1}"
        state.files[output_id] = ("\n".join(lines) + "\n").encode()
        batch_id = f"batch-{len(state.batches) + 1}"
        state.batches[batch_id] = {
            "id": batch_id,
            "object": "batch",
            "endpoint": body["endpoint"],
            "input_file_id": body["input_file_id"],
            "completion_window": "24h",
            "status": "completed",
            "output_file_id": output_id,
            "created_at": 0,
        }
        self._send(200, json.dumps(state.batches[batch_id]).encode())

    def do_POST(self) -> None:
        state = self.server_state
        length = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(length)
        if self.path == "/v1/files":
            return self._upload(raw)
        body = json.loads(raw or b"{}")
        if self.path == "/v1/batches":
            return self._batch(body)
        seen = _parse(body, self.headers.get("Authorization"), state.api_key)
        with state._lock:
            state.requests.append(seen)
            state.in_flight += 1
            state.max_in_flight = max(state.max_in_flight, state.in_flight)
            fault = state.script.pop(0) if state.script else None
        try:
            if state.latency:
                time.sleep(state.latency)
            self._respond(state, seen, body, fault)
        finally:
            with state._lock:
                state.in_flight -= 1

    def _respond(self, state: JudgeServer, seen: Seen, body: dict[str, Any], fault: Any) -> None:
        if not seen.authorized:
            return self._error(401, "Incorrect API key provided")
        if state.reject_json_schema and seen.response_format == "json_schema":
            return self._error(400, "response_format json_schema is not supported")
        if fault is None and seen.document:
            marker = re.search(r"\[\[(\w+)\]\]", seen.document)
            fault = marker.group(1) if marker else None
        if fault is not None:
            kind, _, arg = str(fault).partition(":")
            if kind == "429":
                return self._error(429, "slow down", {"Retry-After": arg or "0"})
            if kind in {"500", "401", "403", "404"}:
                return self._error(int(kind), f"injected {kind}")
            if kind == "hang":
                state._release.wait(float(arg or 30))
                return self._error(500, "hung")
            if kind == "malformed":
                return self._send(200, b"{this is not json")
            if kind == "refuse":
                return self._send(200, _completion(None, refusal="I can't help with that."))
            if kind == "length":
                return self._send(200, _completion('{"on_topic": tr', finish="length"))
            if kind == "schema":
                return self._send(200, _completion('{"verdict": "yes"}'))
        answer = state.answer(seen)
        self._send(200, _completion(json.dumps(answer)))


@contextmanager
def serve(**options: Any) -> Iterator[JudgeServer]:
    """Run a JudgeServer on 127.0.0.1 (a free port) for the duration of the block."""
    state = JudgeServer(**options)
    handler = type("Handler", (_Handler,), {"server_state": state})
    server_class = type("Server", (ThreadingHTTPServer,), {"request_queue_size": 256})
    httpd = server_class(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    state.port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        state._release.set()
        httpd.shutdown()
        httpd.server_close()


def main() -> None:
    """``python tests/judge_server.py --latency 0.05``: serve until killed; prints the port."""
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--latency", type=float, default=0.0)
    args = parser.parse_args()
    with serve(latency=args.latency) as state:
        print(state.port, flush=True)
        threading.Event().wait()


if __name__ == "__main__":
    main()
