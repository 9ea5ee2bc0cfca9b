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
  servers without structured outputs;
- ``server.fault``: a fault for every request (after the script), one of the above or
  ``"503html"`` (503, HTML body), ``"reset"`` (close the connection unanswered), ``"never"``
  (never answer until the server stops), ``"quota"`` (OpenAI's insufficient_quota 429),
  ``"nullmsg"`` (``message: null``), ``"badusage"`` (usage with strings), ``"retrysoon"``
  (429 with ``Retry-After: soon``), ``"400"`` (the same 400 every time), ``"filtered"``
  (Azure's content-filter 400), ``"408"``, ``"fenced"`` (the answer in a Markdown code
  fence), ``"deep"`` (JSON nested 50,000 deep), ``"hugeusage"`` (token counts of 1e30),
  ``"dupkey"`` (an answer naming a key twice, the second value contradicting the first);
- ``server.usage``: the (prompt, completion) tokens every answer reports (None: no usage
  block at all);
- ``server.override``: fields merged into every answer (``{"score": 1.7}``, NaN, ``"yes"``);
- ``server.echo_auth``: error messages, answers' reasons and the ``model`` field echo the
  Authorization header;
- ``server.reasoning``: answers like gpt-5-mini / the o-series: 400 for ``max_tokens`` and
  for a ``temperature`` other than 1;
- ``server.refuse_share``: refuse that share of the pairs, chosen by a hash of query and
  document (a rerun refuses the same ones);
- ``server.hold_after``: after that many answers, hold every request until the server stops
  (to kill a run after N paid answers); ``server.answers`` counts the answers sent;
- the Batch API (``POST /v1/files``, ``/v1/batches``): ``batch_*`` fields set a new batch's
  status, partial output, error-file lines, a failed batch's errors and a 4xx on create;
  ``batch_end(status)`` ends the batches still running.

It also writes queries for ``synth`` (a system message asking for one "Query style: S"):
deterministically, from the document's longest distinct words (a stand-in for rare terms),
a different slice of them per style (see :func:`write_query`), so a keyword, question or
constraint query shares all its words with the document and grades 3, while a paraphrase
keeps one or two of its three words (the rest reversed): about half grade 1 and fail the
answerability filter.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

#: the usage every answer reports unless ``server.usage`` says otherwise
DEFAULT_USAGE = (100, 20)
RUNNING = {"validating", "in_progress", "finalizing", "cancelling"}  # Batch API states
STOP = {"the", "a", "an", "of", "on", "in", "for", "to", "and", "is", "are", "what", "how"}


def terms(text: str) -> set[str]:
    return {t for t in re.findall(r"[a-z0-9]+", text.lower()) if len(t) > 1 and t not in STOP}


def overlap(query: str, document: str) -> float:
    wanted = terms(query)
    return len(wanted & terms(document)) / len(wanted) if wanted else 0.0


_STYLE = re.compile(r"Query style: (\w+)")
#: each style's slice of the document's ranked words (three words each)
STYLE_SLICE = {"keyword": 0, "question": 3, "paraphrase": 6, "constraint": 9}


def write_query(style: str, document: str) -> str:
    """The query this server writes in ``style`` for ``document``: words longer than two
    letters, longest first (first seen breaks ties), three of them per style."""
    seen: dict[str, int] = {}
    for word in re.findall(r"[a-z0-9]+", document.lower()):
        if len(word) > 2 and word not in STOP:
            seen.setdefault(word, len(seen))
    ranked = sorted(seen, key=lambda w: (-len(w), seen[w])) or ["nothing"]
    start = STYLE_SLICE.get(style, 0)
    a, b, c = (ranked[(start + i) % len(ranked)] for i in range(3))
    if style == "question":
        return f"what is the {a} of the {b} in {c}"
    if style == "paraphrase":  # one or two words kept, by the document's hash
        keep_two = hashlib.sha256(document.encode()).digest()[0] % 2 == 0
        return f"how is the {a} for {b if keep_two else b[::-1]} and {c[::-1]}"
    if style == "constraint":
        return f"{a} of {b} for {c}"
    return f"{a} {b} {c}"


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
    body: dict[str, Any] = field(default_factory=dict)  # the whole request body
    arrived: float = 0.0  # time.monotonic() when the request was read
    finished: float = 0.0  # time.monotonic() when the response was written
    status: int = 0  # the HTTP status answered (0: none, the connection was dropped)


@dataclass
class JudgeServer:
    latency: float = 0.0
    api_key: str | None = None
    reject_json_schema: bool = False
    graded: bool = False
    script: list[str] = field(default_factory=list)
    fault: str | None = None
    override: dict[str, Any] = field(default_factory=dict)
    usage: tuple[int, int] | None = DEFAULT_USAGE
    echo_auth: bool = False
    reasoning: bool = False
    refuse_share: float = 0.0
    hold_after: int | None = None
    answers: int = 0
    requests: list[Seen] = field(default_factory=list)
    files: dict[str, bytes] = field(default_factory=dict)
    batches: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The Batch API (see ``batch_end``): what a new batch reports; how many of its requests
    # ran (None: all), of which the first ``batch_failed`` are error-file lines; a failed
    # batch's errors.data messages; a (status, message) answer to POST /v1/batches, where
    # "{authorization}" in the message echoes the request's Authorization header.
    batch_status: str = "completed"
    batch_ran: int | None = None
    batch_failed: int = 0
    batch_errors: list[str] = field(default_factory=list)
    batch_create_error: tuple[int, str] | None = None
    batch_create_ok: int = 0  # batches created before batch_create_error applies
    batch_results: dict[str, dict[str, Any]] = field(default_factory=dict)  # id -> on end
    in_flight: int = 0
    max_in_flight: int = 0
    port: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _release: threading.Event = field(default_factory=threading.Event)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def batch_end(self, status: str = "completed") -> None:
        """Every batch still running ends in ``status`` (completed, expired, cancelled),
        with the output and error files of the requests it ran."""
        for batch_id, batch in self.batches.items():
            if batch["status"] in RUNNING:
                batch.update(self.batch_results[batch_id], status=status)

    def answer(self, seen: Seen) -> dict[str, Any]:
        """The verdict this server gives: term overlap of query and document (with a
        confidence when the request's schema asks for one), then ``override``."""
        style = _STYLE.search(seen.system)
        if style is not None and seen.query is None:  # synth: write a query
            query = write_query(style.group(1), seen.document or "")
            return {"reason": f"a {style.group(1)} query", "query": query, **self.override}
        score = overlap(seen.query or "", seen.document or "")
        wanted = (seen.body.get("response_format") or {}).get("json_schema") or {}
        schema = wanted.get("schema") or {}
        fields = schema.get("properties") or {}
        answer: dict[str, Any]
        if "grade" in fields or seen.system.find("grade: 0, 1, 2 or 3") >= 0:
            answer = {"grade": round(score * 3), "reason": f"{score:.0%} of the query terms"}
        else:
            answer = {
                "on_topic": score >= 0.5,
                "score": round(score, 3),
                "reason": f"{score:.0%} of the query terms appear",
            }
        if "confidence" in fields:
            answer["confidence"] = 0.9
        return {**answer, **self.override}

    def refuses(self, seen: Seen) -> bool:
        """Whether ``refuse_share`` picks this pair (the same pairs on every run)."""
        digest = hashlib.sha256(f"{seen.query}\n{seen.document}".encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2**64 < self.refuse_share


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
    return Seen(system, user, tag, query, document, fmt, authorized, outside, body)


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

    def _send(
        self,
        status: int,
        body: bytes,
        headers: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> None:
        self.status = status
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def _error(
        self,
        status: int,
        message: str,
        headers: dict[str, str] | None = None,
        kind: str = "test",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        """An OpenAI-shaped error body (echoing the Authorization header with ``echo_auth``)."""
        if self.server_state.echo_auth:
            message += f" (you sent Authorization: {self.headers.get('Authorization')})"
        error = {"message": message, "type": kind, "param": param, "code": code}
        self._send(status, json.dumps({"error": error}).encode(), headers)

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
        """``POST /v1/batches``: answer the input file's requests now (the first
        ``batch_ran``, of which ``batch_failed`` go to the error file); the batch shows
        them when it reports an ended status (at once, or at ``batch_end``)."""
        state = self.server_state
        if state.batch_create_error is not None and len(state.batches) >= state.batch_create_ok:
            status, message = state.batch_create_error
            authorization = self.headers.get("Authorization") or ""
            return self._error(status, message.replace("{authorization}", authorization))
        requests = [json.loads(line) for line in state.files[body["input_file_id"]].splitlines()]
        ran = requests[: state.batch_ran]
        outputs, errors = [], []
        for number, request in enumerate(ran):
            if number < state.batch_failed:
                error = {"error": {"message": "injected line failure", "type": "test"}}
                response = {"status_code": 400, "body": error}
                errors.append({"custom_id": request["custom_id"], "response": response})
                continue
            seen = _parse(request["body"], None, None)
            completion = json.loads(_completion(json.dumps(state.answer(seen))))
            response = {"status_code": 200, "body": completion}
            outputs.append({"custom_id": request["custom_id"], "response": response})
        batch_id = f"batch-{len(state.batches) + 1}"
        ended: dict[str, Any] = {
            "request_counts": {
                "total": len(requests),
                "completed": len(outputs),
                "failed": len(errors),
            }
        }
        for kind, records in (("output_file_id", outputs), ("error_file_id", errors)):
            if records:
                file_id = f"file-{len(state.files) + 1}"
                state.files[file_id] = "".join(json.dumps(r) + "\n" for r in records).encode()
                ended[kind] = file_id
        if state.batch_status == "failed":
            data = [{"code": "invalid", "message": m, "line": 1} for m in state.batch_errors]
            ended = {"errors": {"object": "list", "data": data}}
        state.batch_results[batch_id] = ended
        state.batches[batch_id] = {
            "id": batch_id,
            "object": "batch",
            "endpoint": body["endpoint"],
            "input_file_id": body["input_file_id"],
            "completion_window": "24h",
            "status": state.batch_status,
            "created_at": 0,
            "request_counts": {"total": len(requests), "completed": 0, "failed": 0},
        }
        if state.batch_status not in RUNNING:
            state.batches[batch_id].update(ended)
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
        seen.arrived = time.monotonic()
        with state._lock:
            state.requests.append(seen)
            state.in_flight += 1
            state.max_in_flight = max(state.max_in_flight, state.in_flight)
            fault = state.script.pop(0) if state.script else state.fault
        self.status = 0
        try:
            if state.latency:
                time.sleep(state.latency)
            self._respond(state, seen, body, fault)
        finally:
            seen.status, seen.finished = self.status, time.monotonic()
            with state._lock:
                state.in_flight -= 1

    def _respond(self, state: JudgeServer, seen: Seen, body: dict[str, Any], fault: Any) -> None:
        if not seen.authorized:
            return self._error(401, "Incorrect API key provided")
        if state.reject_json_schema and seen.response_format == "json_schema":
            return self._error(400, "response_format json_schema is not supported")
        if state.reasoning and "max_tokens" in body:
            return self._error(
                400,
                "Unsupported parameter: 'max_tokens' is not supported with this model. "
                "Use 'max_completion_tokens' instead.",
                kind="invalid_request_error",
                param="max_tokens",
                code="unsupported_parameter",
            )
        if state.reasoning and body.get("temperature", 1) != 1:
            return self._error(
                400,
                f"Unsupported value: 'temperature' does not support {body['temperature']} "
                "with this model. Only the default (1) value is supported.",
                kind="invalid_request_error",
                param="temperature",
                code="unsupported_value",
            )
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
            if kind == "503html":
                page = b"<html><body><h1>503 Service Temporarily Unavailable</h1></body></html>"
                return self._send(503, page, content_type="text/html")
            if kind == "reset":
                return self._drop()
            if kind == "never":
                state._release.wait()
                return self._drop()
            if kind == "quota":
                return self._error(
                    429,
                    "You exceeded your current quota, please check your plan and billing details.",
                    kind="insufficient_quota",
                    code="insufficient_quota",
                )
            if kind == "retrysoon":
                return self._error(429, "slow down", {"Retry-After": "soon"})
            if kind == "filtered":  # Azure's content filter: about this document only
                return self._error(
                    400,
                    "The response was filtered due to the prompt triggering Azure OpenAI's "
                    "content management policy.",
                    kind="invalid_request_error",
                    code="content_filter",
                )
            if kind == "408":
                return self._error(408, "request timed out")
            if kind == "fenced":
                fenced = f"```json\n{json.dumps(state.answer(seen))}\n```"
                return self._answer(state, _completion(fenced))
            if kind == "dupkey":  # the key the answer turns on, twice, contradicting itself
                answer = state.answer(seen)
                name = next(k for k in ("query", "grade", "on_topic") if k in answer)
                other = {"query": "another query", "grade": 0}.get(name, not answer[name])
                text = json.dumps(answer)[:-1] + f", {json.dumps(name)}: {json.dumps(other)}}}"
                return self._answer(state, _completion(text))
            if kind == "deep":
                return self._answer(state, _completion("[" * 50_000 + "]" * 50_000))
            if kind == "hugeusage":
                completion = json.loads(_completion(json.dumps(state.answer(seen))))
                completion["usage"] = {"prompt_tokens": 10**30, "completion_tokens": 1e308}
                return self._answer(state, json.dumps(completion).encode())
            if kind == "400":
                return self._error(
                    400,
                    "This model is not available for chat completions on this project.",
                    kind="invalid_request_error",
                    code="model_not_available",
                )
            if kind in {"nullmsg", "badusage"}:
                completion = json.loads(_completion(json.dumps(state.answer(seen))))
                if kind == "nullmsg":
                    completion["choices"][0]["message"] = None
                else:
                    completion["usage"] = {"prompt_tokens": "many", "completion_tokens": "n/a"}
                return self._answer(state, json.dumps(completion).encode())
        if state.refuses(seen):
            return self._answer(state, _completion(None, refusal="I can't help with that."))
        answer = state.answer(seen)
        if not state.echo_auth:
            return self._answer(state, _completion(json.dumps(answer)))
        authorization = self.headers.get("Authorization")
        answer["reason"] = f"{answer['reason']}; {authorization}"
        body = json.loads(_completion(json.dumps(answer)))
        body["model"] = f"judge-test for {authorization}"
        self._answer(state, json.dumps(body).encode())

    def _answer(self, state: JudgeServer, body: bytes) -> None:
        """A 200 answer, counted; held unanswered once ``hold_after`` answers were sent."""
        with state._lock:
            hold = state.hold_after is not None and state.answers >= state.hold_after
            state.answers += not hold
        if hold:
            state._release.wait()
            return self._drop()
        if state.usage != DEFAULT_USAGE:
            completion = json.loads(body)
            if state.usage is None:
                completion.pop("usage", None)
            else:
                prompt, output = state.usage
                completion["usage"] = {
                    "prompt_tokens": prompt,
                    "completion_tokens": output,
                    "total_tokens": prompt + output,
                }
            body = json.dumps(completion).encode()
        self._send(200, body)

    def _drop(self) -> None:
        """Close the connection without an answer (an RST: linger 0)."""
        self.close_connection = True
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


def _quiet(server: ThreadingHTTPServer, request: Any, client_address: Any) -> None:
    """A client that hung up (the judge gave up on a request) is no server error; anything
    else is printed as usual. Quiet, because an in-process pytester run captures this
    thread's stderr too and would show the traceback as the judge's."""
    import sys

    if not isinstance(sys.exc_info()[1], ConnectionError):
        ThreadingHTTPServer.handle_error(server, request, client_address)


@contextmanager
def serve(**options: Any) -> Iterator[JudgeServer]:
    """Run a JudgeServer on 127.0.0.1 (a free port) for the duration of the block."""
    state = JudgeServer(**options)
    handler = type("Handler", (_Handler,), {"server_state": state})
    server_class = type(
        "Server", (ThreadingHTTPServer,), {"request_queue_size": 256, "handle_error": _quiet}
    )
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
    """``python tests/judge_server.py --latency 0.05 [--fault 500]``: serve until killed;
    prints the port."""
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--latency", type=float, default=0.0)
    parser.add_argument("--fault", default=None, help="a fault for every request (see above)")
    args = parser.parse_args()
    with serve(latency=args.latency, fault=args.fault) as state:
        print(state.port, flush=True)
        threading.Event().wait()


if __name__ == "__main__":
    main()
