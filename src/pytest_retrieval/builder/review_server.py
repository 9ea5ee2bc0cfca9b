"""``pytest-retrieval review``: go through a review file's proposals on a local page.

A standard-library HTTP server (``ThreadingHTTPServer``) serves one self-contained page
(``review_page/``: HTML, JS, CSS; no CDN, no fonts, nothing from the network) and a small
JSON API. The review file is the only state: every decision is written to it at once with
:func:`review_file.record_decision` (atomic, under a file lock), so a reload, a restart or a
second window resumes where the file says, and a CLI writing the same file loses nothing.

Safety, because a local port is reachable by every page the browser opens:

- the server binds a loopback address only (``--host`` refuses anything else);
- every request's ``Host`` header must name this server (``127.0.0.1:PORT``,
  ``localhost:PORT``): a DNS-rebinding page's ``Host`` is its own name, so it is refused;
- a random token, new each run, is in the URL printed (``/?token=...``), the only way to get
  the page; the page sends it back in an ``X-Review-Token`` header on every API call. Another
  site cannot read the page (same-origin policy) nor send that header without a CORS
  preflight, which this server never grants; a POST whose ``Origin`` is not this server's is
  refused too;
- the page's Content-Security-Policy is ``default-src 'self'`` (no inline script; document
  text is only ever set as text, never as HTML).
"""

from __future__ import annotations

import argparse
import contextlib
import getpass
import ipaddress
import json
import secrets
import socket
import sys
import threading
import webbrowser
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from pytest_retrieval._internal.io import now
from pytest_retrieval._internal.json import loads
from pytest_retrieval.builder.review_file import (
    ACTIONS,
    Decision,
    Proposal,
    Review,
    ReviewFileError,
    decision_problem,
    proposal_json,
    read_review,
    record_decision,
)
from pytest_retrieval.errors import InputError, RetrievalError, UsageError

#: the action a POST sends to clear a proposal's decision (the others are the file's)
UNDO = "undo"
MAX_BODY = 64 * 1024  # a decision is a few hundred bytes
TOKEN_HEADER = "X-Review-Token"
CSP = "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
ASSETS = {
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/style.css": ("style.css", "text/css; charset=utf-8"),
}
TOKEN_SLOT = "__REVIEW_TOKEN__"
#: seconds a client may take to send a request or read an answer: a stalled one is dropped
#: (its thread ends), not waited on forever
CLIENT_TIMEOUT = 10.0
#: seconds a connection may last in all (one request: HTTP/1.0): a client that trickles a
#: byte every few seconds, never stalling for CLIENT_TIMEOUT, is cut off all the same
CONNECTION_LIMIT = 60.0
#: how a client that went away shows: normal (a closed tab, a reload), never a traceback
DROPPED = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, TimeoutError)


class RequestError(RetrievalError):
    """A request this server refuses: the status and the one-line reason sent back."""

    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``review`` command's options (cli.py registers the command)."""
    parser.add_argument("review", type=Path, help="the review file (from pytest-retrieval pool)")
    parser.add_argument(
        "--port", type=int, default=0, help="port to listen on (default 0: any free port)"
    )
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="loopback address to bind (default 127.0.0.1; other addresses are refused)",
    )
    parser.add_argument(
        "--no-open", action="store_true", help="print the URL only; do not open a browser"
    )
    parser.add_argument(
        "--by", metavar="NAME", help="reviewer name stored with each decision (default: login)"
    )


def run(args: argparse.Namespace) -> int:
    """Check the file, serve the page until Ctrl-C; 0 on a clean stop."""
    bind = loopback_host(args.host)
    if bind is None:
        raise UsageError(
            f"--host {args.host}: not a loopback address; the review page writes to your "
            "files, so it is served on 127.0.0.1 (or ::1) only"
        )
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port {args.port}: not a port number (0-65535; 0 picks a free one)")
    try:
        review = read_review(args.review)
    except OSError as exc:
        raise InputError(f"{args.review}: cannot read ({exc.strerror or exc})") from exc
    try:
        server = ReviewServer(args.review, bind, args.port, by=args.by or reviewer_name())
    except OSError as exc:
        raise RetrievalError(
            f"cannot listen on {args.host}:{args.port} ({exc.strerror or exc}); "
            "pass --port 0 for a free port"
        ) from exc
    progress = progress_of(review.proposals)
    print(
        f"Reviewing {args.review}: {progress['total']} proposals, {progress['decided']} decided, "
        f"{progress['skipped']} skipped.",
        flush=True,
    )
    try:  # Ctrl-C from here on stops cleanly, even while the browser thread starts
        print(f"Open {server.url} (Ctrl-C to stop)", flush=True)
        if not args.no_open:
            open_browser(server.url)
        server.serve_forever()
    except KeyboardInterrupt:
        print("\nStopped. Decisions are in the review file; run it again to resume.")
    finally:
        server.server_close()
    return 0


def loopback_host(host: str) -> str | None:
    """The address to bind for ``host``, or None when it is not a loopback address."""
    if host == "localhost":
        return "127.0.0.1"
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None
    return str(address) if address.is_loopback else None


def reviewer_name() -> str:
    """Who the decisions are by when ``--by`` is not given: the login name."""
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no login name in a bare container
        return "reviewer"


def open_browser(url: str) -> None:
    """Try the user's browser, in a thread: a console browser (w3m, lynx) would otherwise
    hold the terminal before the server runs, and a machine without any browser (SSH, CI)
    just has the printed URL."""

    def launch() -> None:
        try:
            opened = webbrowser.open(url)
        except Exception:  # any failure of a browser launcher is harmless here
            opened = False
        if not opened:
            print("(no browser could be opened; open the URL above)", file=sys.stderr)

    threading.Thread(target=launch, name="open-browser", daemon=True).start()


def progress_of(proposals: tuple[Proposal, ...]) -> dict[str, int]:
    """Counts for the progress bar: ``skip`` is a visible "later", not a decision."""
    actions = [p.decision.action if p.decision else None for p in proposals]
    skipped = actions.count("skip")
    undecided = actions.count(None)
    return {
        "total": len(proposals),
        "decided": len(proposals) - skipped - undecided,
        "skipped": skipped,
        "undecided": undecided,
    }


def resume_index(proposals: tuple[Proposal, ...]) -> int:
    """Where the page opens: the first proposal with no decision, else the first skipped
    one, else the first."""
    for wanted in (None, "skip"):
        for index, proposal in enumerate(proposals):
            if (proposal.decision.action if proposal.decision else None) == wanted:
                return index
    return 0


def proposal_view(proposal: Proposal) -> dict[str, Any]:
    """The proposal as the file has it, plus its key and the grade its decision records."""
    return {
        **proposal_json(proposal),
        "key": list(proposal.key),
        "final_grade": proposal.final_grade,
    }


def review_json(review: Review) -> dict[str, Any]:
    """Everything the page needs at load: the file's header and proposals, the counts, and
    where to start."""
    return {
        "file": str(review.path),
        "header": review.header,
        "proposals": [proposal_view(p) for p in review.proposals],
        "progress": progress_of(review.proposals),
        "resume": resume_index(review.proposals),
    }


def parse_decision(body: bytes, by: str) -> tuple[tuple[str, str, str], Decision | None]:
    """The key and decision (None: undo) a POST body asks for."""
    try:
        data = loads(body)  # strict: a key twice is refused, not settled by the last one
    except (ValueError, UnicodeDecodeError) as exc:  # JsonProblem is a ValueError
        raise RequestError(HTTPStatus.BAD_REQUEST, f"the body is not JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise RequestError(
            HTTPStatus.BAD_REQUEST, 'the body must be a JSON object {"key", "action", "grade"}'
        )
    raw_key = data.get("key")
    if not (
        isinstance(raw_key, list) and len(raw_key) == 3 and all(isinstance(k, str) for k in raw_key)
    ):
        raise RequestError(
            HTTPStatus.BAD_REQUEST, f'"key" must be [query_id, doc_id, kind], got {raw_key!r}'
        )
    key = (raw_key[0], raw_key[1], raw_key[2])
    action, grade = data.get("action"), data.get("grade")
    if action == UNDO:
        if grade is not None:
            raise RequestError(HTTPStatus.BAD_REQUEST, f"'undo' takes no grade (got {grade!r})")
        return key, None
    problem = decision_problem(action, grade)
    if problem:
        more = f", or {UNDO!r} to clear the decision" if action not in ACTIONS else ""
        raise RequestError(HTTPStatus.BAD_REQUEST, problem + more)
    return key, Decision(action=str(action), grade=grade, by=by, at=now())


class ReviewServer(ThreadingHTTPServer):
    """The page, its assets and the API for one review file, on a loopback address."""

    daemon_threads = True

    def __init__(self, path: Path, host: str, port: int, *, by: str) -> None:
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        super().__init__((host, port), ReviewHandler)
        self.review_path = path
        self.by = by
        self.token = secrets.token_urlsafe(24)
        port = self.server_address[1]
        shown = f"[{host}]" if ":" in host else host
        self.origin = f"http://{shown}:{port}"
        self.hosts = {f"{shown}:{port}"}
        if host == "127.0.0.1":
            self.hosts.add(f"localhost:{port}")
        self.url = f"{self.origin}/?token={self.token}"
        page = resources.files("pytest_retrieval.builder").joinpath("review_page")
        self.index = (
            page.joinpath("index.html").read_text(encoding="utf-8").replace(TOKEN_SLOT, self.token)
        )
        self.assets = {
            route: (page.joinpath(name).read_bytes(), kind)
            for route, (name, kind) in ASSETS.items()
        }

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away (or stalled past :data:`CLIENT_TIMEOUT`) is dropped
        quietly; anything else is printed as ``socketserver`` prints it."""
        if isinstance(sys.exc_info()[1], DROPPED):
            return
        super().handle_error(request, client_address)

    def is_token(self, given: str) -> bool:
        """Constant-time check; as bytes, since a header may hold any character."""
        return secrets.compare_digest(given.encode("utf-8", "replace"), self.token.encode())


class ReviewHandler(BaseHTTPRequestHandler):
    server: ReviewServer
    server_version = "pytest-retrieval-review"
    sys_version = ""
    timeout = CLIENT_TIMEOUT  # on the socket: every read and write of a stalled client ends

    connection_limit = CONNECTION_LIMIT

    def setup(self) -> None:
        super().setup()
        self._deadline = threading.Timer(self.connection_limit, self._cut)
        self._deadline.daemon = True
        self._deadline.start()

    def finish(self) -> None:
        self._deadline.cancel()
        super().finish()

    def _cut(self) -> None:
        """The connection outlived :data:`CONNECTION_LIMIT`: its reads and writes end
        (a dropped client, said nothing of), and so does its thread."""
        with contextlib.suppress(OSError):  # gone already
            self.connection.shutdown(socket.SHUT_RDWR)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the terminal shows the URL, not a line per keypress."""

    def do_GET(self) -> None:
        self.respond(self.get)

    def do_POST(self) -> None:
        self.respond(self.post)

    def respond(self, method: Any) -> None:
        try:
            self.check_host()
            method()
        except RequestError as exc:
            self.close_connection = True  # a refused POST's body may be unread
            self.send_json(exc.status, {"error": exc.message})
        except ReviewFileError as exc:  # the file changed under the page, or went bad
            self.close_connection = True
            self.send_json(HTTPStatus.CONFLICT, {"error": str(exc)})

    def check_host(self) -> None:
        host = self.headers.get("Host", "")
        if host not in self.server.hosts:
            raise RequestError(
                HTTPStatus.FORBIDDEN,
                f"Host {host!r} is not this server's ({' or '.join(sorted(self.server.hosts))}); "
                "open the URL pytest-retrieval review printed",
            )

    def check_token(self) -> None:
        if not self.server.is_token(self.headers.get(TOKEN_HEADER, "")):
            raise RequestError(
                HTTPStatus.FORBIDDEN,
                f"missing or wrong {TOKEN_HEADER} header; use the page at the URL "
                "pytest-retrieval review printed",
            )

    def get(self) -> None:
        url = urlsplit(self.path)
        if url.path == "/":
            token = parse_qs(url.query).get("token", [""])[0]
            if not self.server.is_token(token):
                raise RequestError(
                    HTTPStatus.FORBIDDEN,
                    "this page needs the token in the URL pytest-retrieval review printed",
                )
            self.send_body(HTTPStatus.OK, self.server.index.encode(), "text/html; charset=utf-8")
        elif url.path in self.server.assets:
            body, kind = self.server.assets[url.path]
            self.send_body(HTTPStatus.OK, body, kind)
        elif url.path == "/favicon.ico":  # browsers ask; a 404 would be a console error
            self.send_body(HTTPStatus.NO_CONTENT, b"", "image/x-icon")
        elif url.path == "/api/review":
            self.check_token()
            self.send_json(HTTPStatus.OK, review_json(read_review(self.server.review_path)))
        else:
            raise RequestError(HTTPStatus.NOT_FOUND, f"no such page: {url.path}")

    def post(self) -> None:
        if urlsplit(self.path).path != "/api/decision":
            raise RequestError(HTTPStatus.NOT_FOUND, f"no such endpoint: {self.path}")
        origin = self.headers.get("Origin")
        if origin is not None and origin.removeprefix("http://") not in self.server.hosts:
            raise RequestError(
                HTTPStatus.FORBIDDEN,
                f"Origin {origin!r} is not this server's ({self.server.origin})",
            )
        self.check_token()
        if self.headers.get_content_type() != "application/json":
            raise RequestError(
                HTTPStatus.UNSUPPORTED_MEDIA_TYPE, "send the decision as application/json"
            )
        body = self.read_body()
        key, decision = parse_decision(body, self.server.by)
        try:
            review = record_decision(self.server.review_path, key, decision)
        except OSError as exc:  # permissions, a full disk: the page says so, the file is intact
            raise RequestError(
                HTTPStatus.INTERNAL_SERVER_ERROR,
                f"{self.server.review_path}: cannot write ({exc.strerror or exc})",
            ) from exc
        proposal = next(p for p in review.proposals if p.key == key)
        self.send_json(
            HTTPStatus.OK,
            {"proposal": proposal_view(proposal), "progress": progress_of(review.proposals)},
        )

    def read_body(self) -> bytes:
        length = self.headers.get("Content-Length")
        if length is None or not (length.isascii() and length.isdigit()):  # not "²"
            raise RequestError(HTTPStatus.LENGTH_REQUIRED, "send a Content-Length header")
        if int(length) > MAX_BODY:
            raise RequestError(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"a decision is at most {MAX_BODY} bytes"
            )
        return self.rfile.read(int(length))

    def send_json(self, status: HTTPStatus, data: Any) -> None:
        # ASCII escapes: a lone surrogate in a document's text cannot break the encoding
        body = json.dumps(data).encode()
        self.send_body(status, body, "application/json; charset=utf-8")

    def send_body(self, status: HTTPStatus, body: bytes, kind: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Content-Security-Policy", CSP)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)
