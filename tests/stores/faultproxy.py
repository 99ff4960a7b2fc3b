"""A small fault-injecting HTTP proxy on 127.0.0.1 in front of a local S3 endpoint (moto's
server): it forwards every request unchanged and, for the object GETs its rule picks, answers
HTTP 500 instead, or sends the headers and half the body and then resets the connection (RST).
It counts the object GETs it saw, so a test can tell what a rerun fetched again.

A lying server, for the GETs its rule picks: ``short`` (half the body, with a Content-Length
that says so: a clean, complete, short answer), ``fin`` (the full Content-Length, half the body,
then a clean close), ``lie-checksum`` (the body as stored, a ``x-amz-checksum-sha256`` header of
other bytes), ``swap:/bucket/key`` (200 with another object's body under this object's headers),
``other-version`` (another object's bytes and ETag, ignoring ``If-Match``: what a ranged retry
gets when the object changed between the requests), ``slow`` (headers, then a byte a second)."""

from __future__ import annotations

import base64
import hashlib
import http.client
import socket
import struct
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

# rule(method, path, headers, nth GET of this path) -> "pass" | "500" | "reset"
Rule = Callable[[str, str, dict[str, str], int], str]


def is_object_get(method: str, path: str) -> bool:
    """A GetObject (not a listing, HEAD, or attributes call)."""
    parts = urlsplit(path)
    segments = [s for s in parts.path.split("/") if s]
    query = {q.split("=")[0] for q in parts.query.split("&") if q}
    return method == "GET" and len(segments) >= 2 and query <= {"versionId", "x-id"}


class FaultProxy:
    def __init__(self, upstream: str) -> None:
        target = urlsplit(upstream)
        self.upstream = (target.hostname or "127.0.0.1", target.port or 80)
        self.rule: Rule = lambda *_: "pass"
        self.other_path = ""  # the object an "other-version" answer serves
        self.gets: dict[str, int] = {}
        self.lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                headers = dict(self.headers.items())
                action = "pass"
                if is_object_get(self.command, self.path):
                    key = urlsplit(self.path).path
                    with proxy.lock:
                        proxy.gets[key] = proxy.gets.get(key, 0) + 1
                        nth = proxy.gets[key]
                    action = proxy.rule(self.command, self.path, headers, nth)
                if action == "500":
                    payload = (b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>"
                               b"InternalError</Code><Message>injected</Message></Error>")
                    self.send_response(500)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                status, upstream_headers, data = proxy.forward(self.command, self.path, body,
                                                               headers)
                length = len(data)
                if action.startswith("swap:") or action == "other-version":
                    other = action[5:] if action.startswith("swap:") else proxy.other_path
                    plain = {k: v for k, v in headers.items()
                             if k.lower() not in {"if-match", "range"}}
                    _s, other_headers, other_data = proxy.forward("GET", other, b"", plain)
                    if action == "other-version":
                        upstream_headers = [(k, v) for k, v in upstream_headers
                                            if k.lower() != "etag"] + \
                            [(k, v) for k, v in other_headers if k.lower() == "etag"]
                        start = int(headers.get("Range", "bytes=0-")[6:].split("-")[0] or 0)
                        other_data = other_data[start:]
                    data = other_data
                    length = len(data)
                elif action == "short":
                    data = data[: len(data) // 2]
                    length = len(data)
                elif action == "fin":
                    data = data[: len(data) // 2]
                elif action == "lie-checksum":
                    lie = base64.b64encode(hashlib.sha256(b"not these bytes").digest()).decode()
                    upstream_headers = [(k, lie if k.lower() == "x-amz-checksum-sha256" else v)
                                        for k, v in upstream_headers]
                self.send_response(status)
                for name, value in upstream_headers:
                    if name.lower() in {"transfer-encoding", "connection"} or (
                            name.lower() == "content-length" and self.command != "HEAD"):
                        continue
                    self.send_header(name, value)
                if self.command != "HEAD":
                    self.send_header("Content-Length", str(length))
                self.end_headers()
                if action == "fin":
                    self.wfile.write(data)
                    self.wfile.flush()
                    self.close_connection = True
                    return
                if action == "slow":
                    try:
                        for i in range(len(data)):
                            self.wfile.write(data[i:i + 1])
                            self.wfile.flush()
                            time.sleep(1.0)
                    except OSError:
                        pass
                    self.close_connection = True
                    return
                if action == "reset" and self.command == "GET" and len(data) > 1:
                    self.wfile.write(data[: len(data) // 2])
                    self.wfile.flush()
                    # SO_LINGER 0: close sends RST, the reader sees a reset mid-body
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                               struct.pack("ii", 1, 0))
                    self.connection.close()
                    self.close_connection = True
                    return
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _any  # noqa: N815

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.endpoint_url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def forward(self, method: str, path: str, body: bytes, headers: dict[str, str]
                ) -> tuple[int, list[tuple[str, str]], bytes]:
        conn = http.client.HTTPConnection(*self.upstream, timeout=60)
        try:
            conn.request(method, path, body=body or None, headers=headers)
            response = conn.getresponse()
            return response.status, response.getheaders(), response.read()
        finally:
            conn.close()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def versioned_bucket(motoserver: Any, name: str, data: dict[str, bytes]) -> str:
    """A versioned bucket on moto holding ``data`` (key -> bytes), each object with its stored
    full-object SHA-256, written by the test's own client (never the kit's)."""
    writer = motoserver.writer_client()
    writer.create_bucket(Bucket=name)
    writer.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
    for key, body in data.items():
        writer.put_object(Bucket=name, Key=key, Body=body, ChecksumAlgorithm="SHA256")
    return name
