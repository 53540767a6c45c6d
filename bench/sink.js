// A local HTTP sink for the benchmarks: answers every POST 200 and counts
// it; GET / returns the count. Node's own http module, no dependency: the
// stand-in for the user's systems should take as little of the machine as
// it can (scripts/sink.py, one Python thread per connection, took about
// as much CPU per delivery as webhookd itself).
//
// Usage: node bench/sink.js PORT
"use strict";
const http = require("http");

let count = 0;
const server = http.createServer((req, res) => {
  if (req.method === "POST") {
    req.on("data", () => {});
    req.on("end", () => {
      count += 1;
      res.writeHead(200, { "content-length": "0" });
      res.end();
    });
    return;
  }
  const body = String(count);
  res.writeHead(200, { "content-length": Buffer.byteLength(body) });
  res.end(body);
});
server.keepAliveTimeout = 60000;
server.listen(Number(process.argv[2]), "127.0.0.1");
