"""Certificates for the TLS tests (made with trustme, once per session, in a temporary directory).

`make_certs(directory)` returns a `Certs`: paths of PEM files, and the ServerTls settings of the
test servers built from them (support/servers.py).  Every certificate but the wrong CA's comes from
one CA, `ca`; `wrong_ca` is a second, unrelated CA that signed nothing the servers use.
"""

from __future__ import annotations

import dataclasses
import datetime
import os

from servers import ServerTls

# The identities of the good server certificate: every address a test connects to.
SERVER_NAMES = ("localhost", "127.0.0.1", "::1")
# The only identity of the "elsewhere" server certificate.
ELSEWHERE = "elsewhere.invalid"
# The only identity of the "localhost-only" server certificate (no IP address in it).
LOCALHOST = "localhost"
CLIENT_NAME = "hiredlock-test-client"
CLIENT_KEY_PASSWORD = "client-key-Pa55"


@dataclasses.dataclass(frozen=True)
class Certs:
    dir: str
    ca: str  # ca.pem: the CA that signed every certificate below
    ca_pem: str  # the same, as text (for ssl_ca_data)
    server_cert: str  # for localhost, 127.0.0.1 and ::1
    server_key: str
    expired_cert: str  # the same names, not valid after yesterday
    expired_key: str
    elsewhere_cert: str  # for "elsewhere.invalid" only
    elsewhere_key: str
    localhost_cert: str  # for "localhost" only: a client must check the name, not the address
    localhost_key: str
    client_cert: str  # a client certificate (the servers with tls-auth-clients yes trust it)
    client_key: str
    client_key_encrypted: str  # client_key, encrypted with CLIENT_KEY_PASSWORD
    client_key_password: str
    wrong_ca: str  # ca.pem of an unrelated CA

    def server(
        self, kind: str = "good", auth_clients: str = "no", protocols: str | None = None
    ) -> ServerTls:
        """A server's TLS settings: its certificate is `kind` ("good", "expired", "elsewhere",
        "localhost-only"); it trusts `ca` for client certificates."""
        cert, key = {
            "good": (self.server_cert, self.server_key),
            "expired": (self.expired_cert, self.expired_key),
            "elsewhere": (self.elsewhere_cert, self.elsewhere_key),
            "localhost-only": (self.localhost_cert, self.localhost_key),
        }[kind]
        return ServerTls(cert, key, self.ca, auth_clients=auth_clients, protocols=protocols)


def _write_leaf(leaf, directory: str, stem: str) -> tuple[str, str]:
    cert = os.path.join(directory, f"{stem}.pem")
    key = os.path.join(directory, f"{stem}.key")
    with open(cert, "wb") as f:
        for blob in leaf.cert_chain_pems:
            f.write(blob.bytes())
    leaf.private_key_pem.write_to_path(key)
    return cert, key


def make_certs(directory: str) -> Certs:
    import trustme
    from cryptography.hazmat.primitives import serialization

    ca = trustme.CA(organization_name="hiredlock tests")
    ca_path = os.path.join(directory, "ca.pem")
    ca.cert_pem.write_to_path(ca_path)

    now = datetime.datetime.now(datetime.timezone.utc)
    server_cert, server_key = _write_leaf(ca.issue_cert(*SERVER_NAMES), directory, "server")
    expired = ca.issue_cert(
        *SERVER_NAMES,
        not_before=now - datetime.timedelta(days=30),
        not_after=now - datetime.timedelta(days=1),
    )
    expired_cert, expired_key = _write_leaf(expired, directory, "expired")
    elsewhere_cert, elsewhere_key = _write_leaf(ca.issue_cert(ELSEWHERE), directory, "elsewhere")
    localhost_cert, localhost_key = _write_leaf(ca.issue_cert(LOCALHOST), directory, "localhost")
    client = ca.issue_cert(CLIENT_NAME)
    client_cert, client_key = _write_leaf(client, directory, "client")

    private = serialization.load_pem_private_key(client.private_key_pem.bytes(), password=None)
    client_key_encrypted = os.path.join(directory, "client-encrypted.key")
    with open(client_key_encrypted, "wb") as f:
        f.write(
            private.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.BestAvailableEncryption(CLIENT_KEY_PASSWORD.encode()),
            )
        )

    wrong_ca_path = os.path.join(directory, "wrong-ca.pem")
    trustme.CA(organization_name="not the hiredlock tests").cert_pem.write_to_path(wrong_ca_path)

    return Certs(
        dir=directory,
        ca=ca_path,
        ca_pem=ca.cert_pem.bytes().decode("ascii"),
        server_cert=server_cert,
        server_key=server_key,
        expired_cert=expired_cert,
        expired_key=expired_key,
        elsewhere_cert=elsewhere_cert,
        elsewhere_key=elsewhere_key,
        localhost_cert=localhost_cert,
        localhost_key=localhost_key,
        client_cert=client_cert,
        client_key=client_key,
        client_key_encrypted=client_key_encrypted,
        client_key_password=CLIENT_KEY_PASSWORD,
        wrong_ca=wrong_ca_path,
    )
