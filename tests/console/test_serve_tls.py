"""``serve --certfile --keyfile``: the console over HTTPS, with the cookies and headers that go with it."""

from __future__ import annotations

import datetime
import ipaddress
import subprocess
import sys
import urllib.request

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.serving import ROOT, start_server

# Its own deployment (serve, manage.py with a data dir of its own): one pass is enough.
pytestmark = pytest.mark.any_database


def self_signed(directory) -> tuple:
    """A certificate for 127.0.0.1 and localhost, and its key, as PEM files."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "airlock.test")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    key_path.chmod(0o600)
    return cert_path, key_path


@pytest.fixture(scope="module")
def https_server(tmp_path_factory):
    directory = tmp_path_factory.mktemp("tls")
    running = start_server(directory / "data", tls=self_signed(directory))
    yield running
    running.stop()


def test_it_serves_https_with_strict_transport_security_and_secure_cookies(https_server):
    assert https_server.base.startswith("https://127.0.0.1:")
    with urllib.request.urlopen(https_server.base + "/login/", context=https_server.tls) as page:
        assert page.status == 200
        assert page.headers["Strict-Transport-Security"].startswith("max-age=31536000")
        cookies = page.headers.get_all("Set-Cookie")
    assert any(c.startswith("csrftoken=") and "Secure" in c for c in cookies), cookies
    status, body = https_server.api("GET", "/api/v1/capabilities")
    assert status == 200 and body["principal"] == "agent:demo-agent"
    assert f"Airlock is running at {https_server.base}/" in https_server.log.read_text()


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--certfile", "/nonexistent/cert.pem"], "needs both --certfile and --keyfile"),
        (
            ["--certfile", "/nonexistent/cert.pem", "--keyfile", "/nonexistent/key.pem"],
            "cannot serve HTTPS with /nonexistent/cert.pem",
        ),
    ],
)
def test_a_missing_or_unreadable_certificate_stops_serve_with_the_reason(
    tmp_path, arguments, message
):
    done = subprocess.run(
        [sys.executable, "manage.py", "serve", "--port", "1", *arguments],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "AIRLOCK_DATA_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0 and message in done.stderr
