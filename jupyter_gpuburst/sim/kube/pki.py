"""Certificates and keys for one local control plane, made with ``cryptography``.

As kubeadm lays them out, smaller: one CA signs the API server's serving certificate and every
client certificate (the components and the harness); a separate key pair signs and verifies
service-account tokens. Client identities are the subject (CN = user, O = groups), which is what
the API server's x509 authenticator reads, so each component acts as the user the bootstrap RBAC
policy already binds (``system:kube-scheduler``, ``system:kube-controller-manager``).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=2)  # a control plane here lives for one test run or demo


def _write(path: Path, data: bytes) -> Path:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    return path


def _key_pem(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def _name(common_name: str, organizations: tuple[str, ...] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    return x509.Name([*attrs, x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


@dataclass(frozen=True)
class ClientCert:
    cert: Path
    key: Path


class Pki:
    """The CA, serving certificate and service-account keys of one control plane, under ``directory``."""

    def __init__(self, directory: Path):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        now = datetime.datetime.now(datetime.timezone.utc)
        self._not_before = now - datetime.timedelta(minutes=5)  # tolerate a clock step
        self._not_after = now + VALIDITY
        self._ca_key = ec.generate_private_key(ec.SECP256R1())
        self._ca_cert = (
            x509.CertificateBuilder()
            .subject_name(_name("gpuburst-local-ca"))
            .issuer_name(_name("gpuburst-local-ca"))
            .public_key(self._ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(self._not_before)
            .not_valid_after(self._not_after)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
            .sign(self._ca_key, hashes.SHA256())
        )
        self.ca = _write(self.dir / "ca.crt", self._ca_cert.public_bytes(serialization.Encoding.PEM))
        # service-account tokens are RS256 by default in every kube-apiserver release
        sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.sa_key = _write(self.dir / "sa.key", _key_pem(sa_key))
        self.sa_pub = _write(
            self.dir / "sa.pub",
            sa_key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo),
        )

    def _issue(self, stem: str, subject: x509.Name, usage, sans: list[x509.GeneralName] | None = None) -> ClientCert:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self._ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(self._not_before)
            .not_valid_after(self._not_after)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self._ca_key, hashes.SHA256())
        return ClientCert(
            cert=_write(self.dir / f"{stem}.crt", cert.public_bytes(serialization.Encoding.PEM)),
            key=_write(self.dir / f"{stem}.key", _key_pem(key)),
        )

    def serving(self, stem: str, hosts: list[str]) -> ClientCert:
        """A serving certificate valid for ``hosts`` (IP addresses and DNS names)."""
        sans: list[x509.GeneralName] = []
        for host in hosts:
            try:
                sans.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                sans.append(x509.DNSName(host))
        return self._issue(stem, _name(hosts[0]), ExtendedKeyUsageOID.SERVER_AUTH, sans)

    def client(self, stem: str, user: str, groups: tuple[str, ...] = ()) -> ClientCert:
        """A client certificate that authenticates as ``user`` in ``groups``."""
        return self._issue(stem, _name(user, groups), ExtendedKeyUsageOID.CLIENT_AUTH)
