"""Throwaway certificates for API servers on loopback: a CA of their own and a serving certificate it signs.

The demo's fake API server (``demo.fake_apiserver``) and the real control plane the demo and the end-to-end
tests start (``demo.control_plane``) serve HTTPS with these, and the kubeconfigs they write trust the CA, so
kubectl and the official Python client verify the server as they would any cluster's (kubectl sends no bearer
token over plain HTTP). Keys are P-256, certificates valid for two days: nothing here outlives a session.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

LOOPBACK_NAMES = ("127.0.0.1", "localhost")
VALIDITY = timedelta(days=2)


@dataclass(frozen=True)
class ServingPki:
    """PEM bytes: the CA's certificate, and the server's certificate and key."""

    ca_cert: bytes
    cert: bytes
    key: bytes

    def write(self, directory: Path, name: str = "server") -> tuple[Path, Path, Path]:
        """``ca.crt``, ``<name>.crt`` and ``<name>.key`` (mode 0600) in ``directory``; their paths."""
        directory.mkdir(parents=True, exist_ok=True)
        ca, cert, key = directory / "ca.crt", directory / f"{name}.crt", directory / f"{name}.key"
        ca.write_bytes(self.ca_cert)
        cert.write_bytes(self.cert)
        key.touch(mode=0o600)
        key.write_bytes(self.key)
        return ca, cert, key


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _subject_alt_names(names: tuple[str, ...]) -> list[x509.GeneralName]:
    out: list[x509.GeneralName] = []
    for name in names:
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            out.append(x509.DNSName(name))
    return out


def serving_pki(common_name: str, names: tuple[str, ...] = LOOPBACK_NAMES) -> ServingPki:
    """A new CA (``<common_name>-ca``) and a server certificate it signs for ``names`` (IP addresses and
    DNS names)."""
    now = datetime.now(UTC) - timedelta(minutes=5)  # a client's clock a little behind still accepts it
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{common_name}-ca")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                          key_encipherment=False, data_encipherment=False, key_agreement=False,
                          encipher_only=False, decipher_only=False),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.SubjectAlternativeName(_subject_alt_names(names)), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(digital_signature=True, key_encipherment=True, content_commitment=False,
                          data_encipherment=False, key_agreement=False, key_cert_sign=False, crl_sign=False,
                          encipher_only=False, decipher_only=False),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    return ServingPki(
        ca_cert=ca_cert.public_bytes(serialization.Encoding.PEM),
        cert=cert.public_bytes(serialization.Encoding.PEM),
        key=_key_pem(key),
    )


def signing_key_pair() -> tuple[bytes, bytes]:
    """A P-256 key pair as PEM (private PKCS#8, public SubjectPublicKeyInfo): a service-account signing key."""
    key = ec.generate_private_key(ec.SECP256R1())
    public = key.public_key().public_bytes(serialization.Encoding.PEM,
                                           serialization.PublicFormat.SubjectPublicKeyInfo)
    return _key_pem(key), public
