"""Real protocol servers for the planner's live signals, on 127.0.0.1: moto's AWS server and recorded answers.

- `AwsFront`: an HTTP server speaking AWS's wire protocols in front of moto's server (`moto[server]`). It answers
  from tests/fixtures/planner_signals/ the three calls moto does not serve for real: Service Quotas'
  GetServiceQuota (moto knows only VPC quotas), EC2 GetSpotPlacementScores (not implemented) and
  DescribeSpotPriceHistory (moto answers a placeholder price of 0.00001 dated 2006); every other request
  (DescribeInstances, DescribeInstanceTypes, RunInstances) is forwarded to moto unchanged.
- `Recorded`: RunPod's GraphQL endpoint and Lambda's instance-types API replaying recorded answers; both refuse a
  request without the expected `Authorization: Bearer <key>` header.

Each holds its recorded data in plain dicts a test may change. `python tests/planner/signal_servers.py` starts them
all, and GCP's (gcp_server.py), and prints the environment that points `yeto shape` at them (the acceptance demo in
docs/PLANNER.md).
"""
from __future__ import annotations

import http.client
import json
import re
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "planner_signals"
RUNPOD_KEY = "rp-test-key-not-a-secret"
LAMBDA_KEY = "lambda-test-key-not-a-secret"
EC2_NS = "http://ec2.amazonaws.com/doc/2016-11-15/"


def load(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


def _region(headers) -> str:
    m = re.search(r"Credential=[^/]+/\d+/([^/]+)/", headers.get("Authorization", ""))
    return m.group(1) if m else "us-east-1"


class Server:
    def __init__(self, handler_cls):
        owner = self

        class Handler(handler_cls):
            server_owner = owner

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.requests: list[str] = []       # what was asked, for tests to check (no headers: they hold keys)
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def start(self):
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class _AwsHandler(BaseHTTPRequestHandler):
    server_owner: AwsFront

    def _reply(self, status: int, body: bytes, ctype: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _forward(self, body: bytes) -> None:
        front = self.server_owner
        conn = http.client.HTTPConnection(front.moto_host, front.moto_port, timeout=30)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
        conn.request(self.command, self.path, body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        self._reply(resp.status, data, resp.getheader("Content-Type") or "text/xml")
        conn.close()

    def do_GET(self):
        self._forward(b"")

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        front, region = self.server_owner, _region(self.headers)
        target = self.headers.get("X-Amz-Target", "")
        if target.endswith(".GetServiceQuota"):
            front.requests.append(f"GetServiceQuota {region}")
            return self._reply(200, json.dumps(front.quota(region, json.loads(body))).encode(),
                               "application/x-amz-json-1.1")
        form = urllib.parse.parse_qs(body.decode(errors="replace"))
        action = (form.get("Action") or [""])[0]
        if action == "GetSpotPlacementScores":
            front.requests.append(f"GetSpotPlacementScores {region}")
            return self._reply(200, front.placement_scores(form).encode(), "text/xml")
        if action == "DescribeSpotPriceHistory":
            front.requests.append(f"DescribeSpotPriceHistory {region}")
            return self._reply(200, front.spot_prices(region, form).encode(), "text/xml")
        front.requests.append(f"{action or target} {region} -> moto")
        return self._forward(body)


class AwsFront(Server):
    """Moto's server behind a front that answers the recorded calls; point boto3 at `url` (AWS_ENDPOINT_URL)."""

    def __init__(self):
        import logging

        from moto.server import ThreadedMotoServer
        logging.getLogger("werkzeug").setLevel(logging.WARNING)     # no line per request
        self.moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.quotas = load("aws_service_quotas.json")
        self.scores = load("aws_spot_placement_scores.json")
        self.prices = load("aws_spot_price_history.json")
        super().__init__(_AwsHandler)

    def start(self):
        self.moto.start()
        self.moto_host, self.moto_port = self.moto.get_host_and_port()
        conn = http.client.HTTPConnection(self.moto_host, self.moto_port, timeout=30)
        conn.request("POST", "/moto-api/reset")     # moto's state is per process: each front starts from none
        conn.getresponse().read()
        conn.close()
        return super().start()

    def stop(self) -> None:
        super().stop()
        self.moto.stop()

    def quota(self, region: str, ask: dict) -> dict:
        code = ask["QuotaCode"]
        value = self.quotas.get(region, {}).get(code, self.quotas["default"][code])
        return {"Quota": {"ServiceCode": ask["ServiceCode"], "ServiceName": "Amazon Elastic Compute Cloud (Amazon EC2)",
                          "QuotaArn": f"arn:aws:servicequotas:{region}:123456789012:ec2/{code}", "QuotaCode": code,
                          "QuotaName": code, "Value": value, "Unit": "None", "Adjustable": True, "GlobalQuota": False}}

    def placement_scores(self, form: dict) -> str:
        types = [v[0] for k, v in sorted(form.items()) if k.startswith("InstanceType")]
        regions = {v[0] for k, v in form.items() if k.startswith("RegionName")}
        scores: dict[str, int] = {}
        for t in types:     # a set of types is scored as its best member, per region
            for region, s in self.scores.get(t, {}).items():
                if region in regions:
                    scores[region] = max(scores.get(region, 0), s)
        items = "".join(f"<item><region>{r}</region><score>{s}</score></item>" for r, s in sorted(scores.items()))
        return (f'<GetSpotPlacementScoresResponse xmlns="{EC2_NS}"><requestId>recorded</requestId>'
                f"<spotPlacementScoreSet>{items}</spotPlacementScoreSet></GetSpotPlacementScoresResponse>")

    def spot_prices(self, region: str, form: dict) -> str:
        types = {v[0] for k, v in form.items() if k.startswith("InstanceType")}
        items = "".join(
            f"<item><instanceType>{t}</instanceType><productDescription>Linux/UNIX</productDescription>"
            f"<spotPrice>{p}</spotPrice><timestamp>2026-12-05T00:00:00.000Z</timestamp>"
            f"<availabilityZone>{az}</availabilityZone></item>"
            for t, az, p in self.prices.get(region, []) if not types or t in types)
        return (f'<DescribeSpotPriceHistoryResponse xmlns="{EC2_NS}"><requestId>recorded</requestId>'
                f"<spotPriceHistorySet>{items}</spotPriceHistorySet><nextToken/></DescribeSpotPriceHistoryResponse>")


class JsonHandler(BaseHTTPRequestHandler):
    def _reply(self, status: int, doc: Any) -> None:
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _RecordedHandler(JsonHandler):
    server_owner: Recorded

    def do_GET(self):
        rec = self.server_owner
        rec.requests.append(f"GET {self.path}")
        if self.path != "/api/v1/instance-types":
            return self._reply(404, {"error": {"code": "global/not-found"}})
        if self.headers.get("Authorization") != f"Bearer {LAMBDA_KEY}":
            return self._reply(401, {"error": {"code": "global/invalid-api-key", "message": "API key was invalid"}})
        return self._reply(200, rec.lambda_types)

    def do_POST(self):
        rec = self.server_owner
        rec.requests.append(f"POST {self.path}")
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        if self.path != "/graphql" or "gpuTypes" not in body.get("query", ""):
            return self._reply(400, {"errors": [{"message": "unexpected request"}]})
        if self.headers.get("Authorization") != f"Bearer {RUNPOD_KEY}":
            return self._reply(401, {"errors": [{"message": "Unauthorized"}]})
        return self._reply(200, rec.runpod_types)


class Recorded(Server):
    """RunPod's GraphQL (`url`/graphql) and Lambda's API (`url`/api/v1/instance-types) replaying recorded answers."""

    def __init__(self):
        self.runpod_types = load("runpod_gpu_types.json")
        self.lambda_types = load("lambda_instance_types.json")
        super().__init__(_RecordedHandler)

    def no_lambda_capacity(self, instance_type: str) -> None:
        self.lambda_types["data"][instance_type]["regions_with_capacity_available"] = []


def environment(aws: AwsFront, rec: Recorded) -> dict[str, str]:
    """What points the planner's real clients at these servers (test keys only)."""
    return {"AWS_ENDPOINT_URL": aws.url, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1", "RUNPOD_API_KEY": RUNPOD_KEY, "LAMBDA_API_KEY": LAMBDA_KEY,
            "YETO_RUNPOD_API_URL": f"{rec.url}/graphql", "YETO_LAMBDA_API_URL": f"{rec.url}/api/v1/instance-types"}


if __name__ == "__main__":
    import sys
    import tempfile

    import gcp_server
    aws, rec = AwsFront().start(), Recorded().start()
    gcp = gcp_server.GcpCompute().start(Path(tempfile.mkdtemp(prefix="yeto-gcp-")))    # its credentials file
    for itype in sys.argv[1:]:      # instance types Lambda's recorded answer shows with no capacity anywhere
        rec.no_lambda_capacity(itype)
    exports = {**environment(aws, rec), **gcp_server.environment(gcp)}
    print(" ".join(f"export {k}={v};" for k, v in exports.items()), flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        aws.stop()
        rec.stop()
        gcp.stop()
