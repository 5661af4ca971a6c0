"""Compute Engine's REST API and Google's OAuth2 token endpoint on 127.0.0.1, replaying a recorded `regions.list`.

google-auth reads the application-default credentials file `start()` writes: a service account (a fresh RSA key)
whose `token_uri` is this server. google-cloud-compute signs its own JWT with that key (Google's self-signed JWT
access), or trades a signed assertion for an access token at POST /token, and sends
GET /compute/v1/projects/<project>/regions with it as a Bearer header. A request whose token is neither this server's
access token nor a JWT signed by the account's key is refused (401), as Google's API refuses it. The answer is
tests/fixtures/planner_signals/gcp_regions.json (a test may change `regions`). `environment(server)` points the
planner's client here.
"""
from __future__ import annotations

import base64
import json
import urllib.parse
from pathlib import Path

from signal_servers import JsonHandler, Server, load

PROJECT = "yeto-test"
ACCOUNT = f"planner@{PROJECT}.iam.gserviceaccount.com"
ACCESS_TOKEN = "gcp-access-token-not-a-secret"


def _b64(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def signed_by(token: str, public_key) -> dict | None:
    """The claims of an RS256 JWT signed by `public_key` and issued by the account, else None."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding
    try:
        head, claims, sig = token.split(".")
        public_key.verify(_b64(sig), f"{head}.{claims}".encode(), padding.PKCS1v15(), hashes.SHA256())
        doc = json.loads(_b64(claims))
    except Exception:  # noqa: BLE001 - anything else is not a token this account signed
        return None
    return doc if doc.get("iss") == ACCOUNT else None


class _Handler(JsonHandler):
    server_owner: GcpCompute

    def do_POST(self):
        gcp = self.server_owner
        form = urllib.parse.parse_qs(self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode())
        gcp.requests.append(f"POST {self.path} {form.get('grant_type', [''])[0]}")
        assertion = form.get("assertion", [""])[0]
        if self.path != "/token" or signed_by(assertion, gcp.public_key) is None:
            return self._reply(400, {"error": "invalid_grant", "error_description": "Invalid JWT Signature."})
        return self._reply(200, {"access_token": ACCESS_TOKEN, "expires_in": 3599, "token_type": "Bearer",
                                 "scope": "https://www.googleapis.com/auth/compute.readonly"})

    def do_GET(self):
        gcp = self.server_owner
        path = urllib.parse.urlsplit(self.path).path
        gcp.requests.append(f"GET {path}")
        token = self.headers.get("Authorization", "").removeprefix("Bearer ")
        if token != ACCESS_TOKEN and signed_by(token, gcp.public_key) is None:
            return self._reply(401, {"error": {"code": 401, "message": "Request is missing required authentication "
                                               "credential.", "status": "UNAUTHENTICATED"}})
        if path != f"/compute/v1/projects/{PROJECT}/regions":
            return self._reply(404, {"error": {"code": 404, "message": f"The resource '{path}' was not found"}})
        return self._reply(200, gcp.regions)


class GcpCompute(Server):
    """The recorded server; `start(folder)` also writes the credentials file that names its token endpoint."""

    def __init__(self) -> None:
        self.regions = load("gcp_regions.json")
        self.credentials = Path()
        self.public_key = None
        super().__init__(_Handler)

    def start(self, folder: Path) -> GcpCompute:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.public_key = key.public_key()
        pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
        self.credentials = folder / "application_default_credentials.json"
        self.credentials.write_text(json.dumps({
            "type": "service_account", "project_id": PROJECT, "private_key_id": "test-key", "private_key": pem,
            "client_email": ACCOUNT, "client_id": "1", "token_uri": f"{self.url}/token"}))
        return super().start()


def environment(gcp: GcpCompute) -> dict[str, str]:
    return {"GOOGLE_APPLICATION_CREDENTIALS": str(gcp.credentials), "GOOGLE_CLOUD_PROJECT": PROJECT,
            "YETO_GCP_COMPUTE_URL": gcp.url}
