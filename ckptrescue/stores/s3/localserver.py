"""A local S3 endpoint for tests, drills and benchmarks: moto's server over real HTTP.

``start_local_s3()`` starts moto's ``ThreadedMotoServer`` on 127.0.0.1 with a free port inside this
process (moto keeps its state per process: whoever fills the buckets must share the process).
It checks at start-up that moto computes CRC32C and CRC64NVME for real (``moto.core.compat``
``HAS_CRC32C`` / ``HAS_CRT``); without them moto silently stores CRC32 values under those names.

Only for rehearsals: the kit itself never writes to a bucket. Tests and drills create their
fixtures with a plain boto3 client of their own.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from ckptrescue.errors import ToolMissingError, optional_module

# moto needs credentials to sign against; these are the documented dummy values.
DUMMY_CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}


@dataclass
class LocalS3:
    """A running local S3 server (use as a context manager or call :meth:`stop`)."""

    endpoint_url: str
    region: str = "us-east-1"
    _server: Any = field(default=None, repr=False)
    _stopped: bool = field(default=False, repr=False)

    def writer_client(self, *, default_checksums: bool = True) -> Any:
        """A plain (writable) boto3 client for building fixtures; never used by the kit itself.

        ``default_checksums=False`` stops boto3 adding its default CRC32 to uploads (objects
        that carry only an ETag, as written by older SDKs and most S3-compatible tools).
        """
        import boto3
        from botocore.config import Config

        when = "when_supported" if default_checksums else "when_required"
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            region_name=self.region,
            config=Config(
                s3={"addressing_style": "path"},
                retries={"max_attempts": 1},
                request_checksum_calculation=when,
                response_checksum_validation=when,
            ),
            **DUMMY_CREDENTIALS,
        )

    def stop(self) -> None:
        if not self._stopped and self._server is not None:
            self._server.stop()
            self._stopped = True

    def __enter__(self) -> LocalS3:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def check_moto_checksum_support() -> None:
    """Raise unless moto computes CRC32C and CRC64NVME (not CRC32 under their names)."""
    with optional_module("moto is not installed",
                         hint="pip install 'moto[server,s3crc32c]' 'botocore[crt]'"):
        from moto.core import compat
    missing = [name for name in ("HAS_CRT", "HAS_CRC32C") if not getattr(compat, name, False)]
    if missing:
        raise ToolMissingError(
            f"moto lacks {', '.join(missing)}: it would store CRC32 under CRC32C/CRC64NVME names",
            hint="pip install 'moto[server,s3crc32c]' 'botocore[crt]'",
        )


def start_local_s3(*, latency_ms: float = 0.0) -> LocalS3:
    """Start moto's S3 server on 127.0.0.1 (free port, HTTP) in a thread of this process.

    ``latency_ms`` delays every response by that much (benchmarks: a realistic round trip to a
    remote region, so that concurrency is measured rather than the server's CPU time).
    """
    check_moto_checksum_support()
    from moto.server import ThreadedMotoServer

    # moto's server reads credentials from nowhere, but boto3 in this process may need some.
    for var, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing")):
        os.environ.setdefault(var, value)

    class _Server(ThreadedMotoServer):
        def _server_entry(self) -> None:
            from moto.moto_server.werkzeug_app import (
                DomainDispatcherApplication,
                MotoRequestHandler,
                create_backend_app,
            )
            from werkzeug.serving import make_server

            app: Any = DomainDispatcherApplication(create_backend_app)
            if latency_ms > 0:
                app = _Delayed(app, latency_ms / 1000.0)
            self._server = make_server(
                self._ip_address, self._port, app, True, request_handler=MotoRequestHandler
            )
            self._server_ready_event.set()
            self._server.serve_forever()

    import logging

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no per-request lines on stderr
    server = _Server(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    return LocalS3(endpoint_url=f"http://{host}:{port}", _server=server)


class _Delayed:
    """WSGI middleware adding a fixed delay per request (simulated network round trip)."""

    def __init__(self, app: Any, delay_s: float) -> None:
        self.app = app
        self.delay_s = delay_s
        self._lock = threading.Lock()

    def __call__(self, environ: Any, start_response: Any) -> Any:
        time.sleep(self.delay_s)
        return self.app(environ, start_response)


def main(argv: list[str] | None = None) -> int:
    """``python -m ckptrescue.stores.s3.localserver [--latency-ms N]``: serve until stdin closes.

    Prints the endpoint URL on the first line of stdout (benchmarks run the server in its own
    process so that its CPU time does not compete with the client's for one interpreter).
    """
    import argparse
    import sys

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--latency-ms", type=float, default=0.0)
    args = parser.parse_args(argv)
    server = start_local_s3(latency_ms=args.latency_ms)
    try:
        sys.stdout.write(server.endpoint_url + "\n")
        sys.stdout.flush()
        sys.stdin.read()  # until the parent closes our stdin or goes away
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
