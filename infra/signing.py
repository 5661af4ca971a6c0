"""The stack's Ed25519 signing key (`<state>/auth/signing.key`, 0600, made once) and the sign / check of a manifest.

The finalizer signs each artifact's manifest.json with it; the public key (hex of its 32 raw bytes) is written
into the manifest and put on the tape (ArtifactWritten), so `yeto verify` can say which stack signed an artifact.
"""
from __future__ import annotations

import fcntl
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from yeto.infra.bus.auth import auth_dir, write_secret

KEY_FILE = "signing.key"
SIG_FILE = "manifest.sig"      # beside manifest.json: the hex signature of manifest.json's exact bytes


def key_path(state_dir: Path) -> Path:
    return auth_dir(state_dir) / KEY_FILE


def stack_key(state_dir: Path) -> Ed25519PrivateKey:
    """The stack's signing key, made on first use (under a lock: two finalizers never make two keys)."""
    path = key_path(state_dir)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(path.parent / ".signing.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.exists():
            key = Ed25519PrivateKey.generate()
            pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
            write_secret(path, pem.decode())
    loaded = serialization.load_pem_private_key(path.read_bytes(), password=None)
    if not isinstance(loaded, Ed25519PrivateKey):
        raise ValueError(f"{path} is not an Ed25519 private key; move it away and a new one is made")
    return loaded


def public_hex(key: Ed25519PrivateKey) -> str:
    """The public half as 64 hex characters (what the manifest and the tape record)."""
    return key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()


def sign(key: Ed25519PrivateKey, data: bytes) -> str:
    """The hex Ed25519 signature of `data` (deterministic: the same key and bytes, the same signature)."""
    return key.sign(data).hex()


def signature_ok(public_key_hex: str, data: bytes, signature_hex: str) -> bool:
    """Whether `signature_hex` is the signature of `data` by the key `public_key_hex` (False for any malformed part)."""
    try:
        public = Ed25519PublicKey.from_public_bytes(bytes.fromhex(public_key_hex))
        public.verify(bytes.fromhex(signature_hex.strip()), data)
    except (ValueError, InvalidSignature):
        return False
    return True
