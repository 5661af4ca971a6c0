"""Per-stack TLS material and credentials for a head VM's nats-server (learners connect over the WAN)."""
from __future__ import annotations

import datetime
import ipaddress
import json
import os
import secrets
from pathlib import Path


def self_signed(directory: Path, hosts: list[str]) -> tuple[Path, Path]:
    """A CA-less self-signed server certificate valid for `hosts`; learners pin it as their CA file."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    directory.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = directory / "server.pem", directory / "server.key"
    if cert_path.exists() and key_path.exists():
        return cert_path, key_path
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "yeto-head")])
    alt = []
    for h in hosts:
        try:
            alt.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            alt.append(x509.DNSName(h))
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.SubjectAlternativeName(alt), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    os.chmod(key_path, 0o600)
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert_path, key_path


def credentials(directory: Path, run_id: str) -> tuple[str, str]:
    """The per-run user and password (created once, kept 0600 under the state dir)."""
    path = directory / "credentials.json"
    if path.exists():
        data = json.loads(path.read_text())
    else:
        directory.mkdir(parents=True, exist_ok=True)
        data = {"user": f"yeto-{run_id}", "password": secrets.token_urlsafe(24)}
        path.write_text(json.dumps(data))
        os.chmod(path, 0o600)
    return data["user"], data["password"]
