"""kubectl reaches a cluster with the credentials of the responder's kubeconfig (the kit gives it
a copy without exec plugins): a server named on the command line (``--server`` with
``--insecure-skip-tls-verify`` or its own ``--certificate-authority``) would receive that bearer
token. Real kubectl against a real TLS listener on 127.0.0.1 that records what it is sent."""

from __future__ import annotations

import http.server
import os
import ssl
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from ckptrescue.record.case import Case

pytestmark = [pytest.mark.needs_tool("kubectl", "openssl")]
CLI = str(Path(sys.executable).with_name("ckptrescue"))
REPO = Path(__file__).resolve().parents[2]
TOKEN = "kit-test-token-0123456789"


def test_kubectl_never_sends_the_kubeconfig_token_elsewhere(tmp_path: Path) -> None:
    key, cert = tmp_path / "k.pem", tmp_path / "c.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                    str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1"],
                   check=True, capture_output=True)
    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            seen.append(str(self.headers.get("Authorization")))
            self.send_response(500)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(str(cert), str(key))
    server.socket = tls.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\n"
        "clusters: [{name: real, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        f"users: [{{name: u, user: {{token: {TOKEN}}}}}]\n"
        "contexts: [{name: c, context: {cluster: real, user: u}}]\ncurrent-context: c\n")
    case = Case.create(tmp_path / "case", title="kubectl credentials")
    url = f"https://127.0.0.1:{server.server_port}"
    env = {**os.environ, "PYTHONPATH": str(REPO), "KUBECONFIG": str(kubeconfig)}
    try:
        for extra in (["--insecure-skip-tls-verify"], [f"--certificate-authority={cert}"],
                      ["--insecure-skip-tls-verify=true"], ["--tls-server-name=127.0.0.1"]):
            r = subprocess.run([CLI, "exec", "--case", str(case.root), "--", "kubectl",
                                f"--server={url}", *extra, "get", "pods",
                                "--request-timeout=5s"], capture_output=True, text=True,
                               timeout=120, env=env)
            assert r.returncode == 3 and "credentials" in r.stderr, (extra, r.stderr)
            r = subprocess.run([CLI, "exec", "--case", str(case.root), "--", "kubectl", "get",
                                "pods", "-s", url, *extra, "--request-timeout=5s"],
                               capture_output=True, text=True, timeout=120, env=env)
            assert r.returncode == 3, (extra, r.stderr)
    finally:
        server.shutdown()
    assert not any(TOKEN in h for h in seen), seen
