#!/usr/bin/env python3
"""A local HTTP sink for the benchmarks: answers every POST 200 and counts
it; GET / returns the count. One thread per connection (the drainer keeps
its connections open).

Usage: scripts/sink.py PORT
"""
import http.server
import sys
import threading

lock, count = threading.Lock(), [0]


class Sink(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        with lock:
            count[0] += 1
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def do_GET(self):  # how many deliveries arrived
        body = str(count[0]).encode()
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


http.server.ThreadingHTTPServer.allow_reuse_address = True
http.server.ThreadingHTTPServer.daemon_threads = True
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Sink).serve_forever()
