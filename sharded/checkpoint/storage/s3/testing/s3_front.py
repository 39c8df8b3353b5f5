#!/usr/bin/env python3
"""s3_front.py: a front on 127.0.0.1 for a real S3 server, for tests.

It relays every HTTP request to the server (the body, the headers and the
Host as the client sent them, so SigV4 signatures still verify), and

* logs each exchange as one JSON line: the front port it came in on (a test
  gives each rank a port of its own), method, path, query, Range header,
  status, body bytes in and out, and when it began and ended (to see how
  many were in flight at once);
* injects faults where asked: --fault 'REGEX,KIND,EVERY[,MAX]' answers every
  EVERY-th request whose "METHOD PATH?QUERY" matches REGEX with KIND -- 503
  (SlowDown), 500 (InternalError) or drop (the connection closed, no reply)
  -- at most MAX times (0 or absent: no limit); a fault is logged too;
* --kill 'REGEX,N,PID' KILLs process PID (the server) when the N-th matching
  request arrives, and drops that request: a crash at an exact point.

Usage: s3_front.py --upstream http://127.0.0.1:PORT --ports N --ready FILE
                   --log FILE [--fault SPEC]... [--kill SPEC]
It binds N ports on 127.0.0.1 (the kernel picks them), writes them to FILE
(one a line) once it listens, and runs until it is TERMed or KILLed.
Nothing but loopback is ever touched.
"""
import argparse
import http.client
import http.server
import json
import os
import re
import signal
import socket
import sys
import threading
import time
import urllib.parse

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "upgrade", "te", "trailer"}


def s3_error(status, code, message):
    body = ('<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>%s</Message></Error>'
            % (code, message)).encode()
    return status, body


FAULT_REPLIES = {
    "503": s3_error(503, "SlowDown", "Please reduce your request rate (s3_front)"),
    "500": s3_error(500, "InternalError", "We encountered an internal error (s3_front)"),
}


class Rule:
    def __init__(self, spec, kill=False):
        parts = spec.split(",")
        self.pattern = re.compile(parts[0])
        self.kill = kill
        if kill:
            self.nth, self.pid = int(parts[1]), int(parts[2])
        else:
            self.kind, self.every = parts[1], int(parts[2])
            self.limit = int(parts[3]) if len(parts) > 3 else 0
            if self.kind not in FAULT_REPLIES and self.kind != "drop":
                raise SystemExit("s3_front: unknown fault kind %r (503, 500 or drop)" % self.kind)
        self.seen = 0
        self.fired = 0

    def fires(self, line):
        """The action for this request, or None."""
        if not self.pattern.search(line):
            return None
        self.seen += 1
        if self.kill:
            if self.seen == self.nth:
                os.kill(self.pid, signal.SIGKILL)
                return "kill"
            return None
        if self.seen % self.every == 0 and (self.limit == 0 or self.fired < self.limit):
            self.fired += 1
            return self.kind
        return None


class Front:
    def __init__(self, args):
        url = urllib.parse.urlsplit(args.upstream)
        if url.hostname not in ("127.0.0.1", "localhost", "::1"):
            raise SystemExit("s3_front: the upstream must be on loopback, not %r" % url.hostname)
        self.host, self.port = url.hostname, url.port
        self.rules = [Rule(f) for f in args.fault] + [Rule(k, kill=True) for k in args.kill]
        self.lock = threading.Lock()
        self.log = open(args.log, "a", buffering=1)

    def decide(self, line):
        with self.lock:
            for rule in self.rules:
                action = rule.fires(line)
                if action:
                    return action
        return None

    def record(self, entry):
        with self.lock:
            self.log.write(json.dumps(entry) + "\n")


def make_handler(front, port):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def drop(self, entry, why):
            """Closes the connection without a reply, and logs why."""
            entry.update(status=0, out=0, fault=why, t1=time.time())
            front.record(entry)
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

        def relay(self):
            t0 = time.time()
            n = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(n) if n else b""
            path, _, query = self.path.partition("?")
            line = "%s %s" % (self.command, self.path)
            entry = {"port": port, "method": self.command, "path": urllib.parse.unquote(path), "query": query,
                     "range": self.headers.get("Range", ""), "in": len(body), "t0": t0}
            action = front.decide(line)
            if action in ("drop", "kill"):
                self.drop(entry, action)
                return
            if action:
                status, data = FAULT_REPLIES[action]
                self.send_response_only(status)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                entry.update(status=status, out=len(data), fault=action, t1=time.time())
                front.record(entry)
                return
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
            try:
                conn = http.client.HTTPConnection(front.host, front.port, timeout=120)
                conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                for k, v in headers.items():
                    conn.putheader(k, v)
                conn.endheaders(body if body or "Content-Length" in self.headers else None)
                resp = conn.getresponse()
                data = resp.read()
                conn.close()
            except (OSError, http.client.HTTPException) as e:
                self.drop(entry, "upstream: %s" % e)  # the server is gone: so is the answer
                return
            self.send_response_only(resp.status, resp.reason)
            for k, v in resp.getheaders():
                if k.lower() in HOP_BY_HOP or (k.lower() == "content-length" and self.command != "HEAD"):
                    continue
                self.send_header(k, v)
            if self.command != "HEAD":
                self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
            entry.update(status=resp.status, out=len(data), t1=time.time())
            front.record(entry)

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = relay

    return Handler


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--ports", type=int, default=1)
    parser.add_argument("--ready", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--fault", action="append", default=[])
    parser.add_argument("--kill", action="append", default=[])
    args = parser.parse_args()
    front = Front(args)
    servers = []
    for _ in range(args.ports):
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), None)
        server.daemon_threads = True
        server.RequestHandlerClass = make_handler(front, server.server_address[1])
        servers.append(server)
        threading.Thread(target=server.serve_forever, daemon=True).start()
    tmp = args.ready + ".tmp"
    with open(tmp, "w") as f:
        f.write("".join("%d\n" % s.server_address[1] for s in servers))
    os.rename(tmp, args.ready)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
