#!/usr/bin/env python3
"""A fake of Stripe's List all events (GET /v1/events), for scripts/chaos.sh.

    scripts/fake-stripe-events.py PORT KEY FILE

Serves, on 127.0.0.1:PORT, the events in FILE (one JSON event a line; the
file is read again on each request, so lines appended since are listed; a
last line without its newline is not there yet) to callers that send
`Authorization: Bearer KEY`. Listed newest first (`created`, then `id`,
descending), with `types[]` (repeated), `created` and `created[gt|gte|lt|lte]`,
`limit` (1 to 100, default 10) and `starting_after`. Errors come in Stripe's
shape: {"error": {"type": ..., "message": ..., "param": ...}}. One log line
a request on stderr. Standard library only.
"""
import http.server
import json
import operator
import sys
import urllib.parse

port, key, path = int(sys.argv[1]), sys.argv[2], sys.argv[3]
COMPARE = {"created": operator.eq, "created[gt]": operator.gt, "created[gte]": operator.ge,
           "created[lt]": operator.lt, "created[lte]": operator.le}


class StripeError(Exception):
    def __init__(self, status, kind, message, param=None):
        super().__init__(message)
        error = {"type": kind, "message": message}
        if param:
            error["param"] = param
        self.status, self.body = status, {"error": error}


def invalid(param, message):
    return StripeError(400, "invalid_request_error", message, param)


def events():
    with open(path, encoding="utf-8") as f:
        lines = [line for line in f if line.endswith("\n") and line.strip()]
    listed = [json.loads(line) for line in lines]
    return sorted(listed, key=lambda e: (e["created"], e["id"]), reverse=True)


def page(query):
    everything = events()
    chosen, limit, types = everything, 10, []
    for name, value in query:
        if name == "types[]":
            types.append(value)
        elif name in COMPARE:
            if not value.lstrip("-").isdigit():
                raise invalid(name, "Invalid integer: " + value)
            chosen = [e for e in chosen if COMPARE[name](e["created"], int(value))]
        elif name == "limit":
            if not value.isdigit() or not 1 <= int(value) <= 100:
                raise invalid(name, "This value must be between 1 and 100.")
            limit = int(value)
        elif name == "starting_after":
            at = next((n for n, e in enumerate(everything) if e["id"] == value), None)
            if at is None:
                raise invalid(name, f"No such event: '{value}'")
            after = {e["id"] for e in everything[at + 1:]}
            chosen = [e for e in chosen if e["id"] in after]
        else:
            raise invalid(name, "Received unknown parameter: " + name)
    if len(types) > 20:
        raise invalid("types", "You may pass at most 20 types.")
    chosen = [e for e in chosen if not types or e["type"] in types]
    return {"object": "list", "url": "/v1/events", "has_more": len(chosen) > limit,
            "data": chosen[:limit]}


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        try:
            if self.headers.get("Authorization") != "Bearer " + key:
                given = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
                raise StripeError(401, "invalid_request_error",
                                  f"Invalid API Key provided: {given[:8]}****{given[-4:]}")
            if url.path != "/v1/events":
                raise StripeError(404, "invalid_request_error",
                                  f"Unrecognized request URL (GET: {url.path}).")
            status, body = 200, page(urllib.parse.parse_qsl(url.query, keep_blank_values=True))
        except StripeError as error:
            status, body = error.status, error.body
        except (OSError, ValueError, KeyError) as error:
            status, body = 500, StripeError(500, "api_error", f"The fake failed: {error!r}").body
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


http.server.ThreadingHTTPServer.allow_reuse_address = True
http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
