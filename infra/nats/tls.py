"""Per-stack TLS material for a head VM's nats-server (learners connect over the WAN); credentials: bus/auth.py."""
from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from yeto.infra.bus.auth import write_secret


def self_signed(directory: Path, hosts: list[str]) -> tuple[Path, Path]:
    """A CA-less self-signed server certificate valid for `hosts`; learners pin it as their CA file."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    cert_path, key_path = directory / "server.pem", directory / "server.key"
    if cert_path.exists() and key_path.exists():
        return cert_path, key_path
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "yeto-head")])
    alt = _alt_names(hosts)
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.SubjectAlternativeName(alt), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    write_secret(key_path, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                             serialization.NoEncryption()).decode())
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert_path, key_path


def _alt_names(hosts: list[str]) -> list:
    from cryptography import x509

    alt: list = []
    for h in hosts:
        try:
            alt.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            alt.append(x509.DNSName(h))
    return alt


def node_certificate(directory: Path, hosts: list[str]) -> tuple[Path, Path]:
    """A head node's own certificate for `hosts` (its address among them), signed by the head's certificate in
    `directory` (self_signed's, made on the laptop and pinned by learners): a node of a head over several VMs presents
    it, so the other nodes' routes, which check the name they dial, and the learners, which pin the head's
    certificate, both accept it. Made afresh at each start (an address may change); the key stays on this machine."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    ca_cert = x509.load_pem_x509_certificate((directory / "server.pem").read_bytes())
    ca_key = serialization.load_pem_private_key((directory / "server.key").read_bytes(), password=None)
    key = ec.generate_private_key(ec.SECP256R1())
    alt = _alt_names(hosts)
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, "yeto-head-node")]))
            .issuer_name(ca_cert.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(ca_cert.not_valid_after_utc)
            .add_extension(x509.SubjectAlternativeName(alt), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    key_path = write_secret(directory / "node.key", key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode())
    cert_path = directory / "node.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert_path, key_path
