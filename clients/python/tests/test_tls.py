"""TLS and mutual TLS through the client's root_certificates /
private_key / certificate_chain (SPEC §3.5). Certificates are made with
the openssl command line for each run."""

import os
import shutil
import subprocess

import grpc
import pytest

import reshard
from conftest import Daemon


def self_signed(directory, name, server):
    """(certificate PEM, key PEM) of a self-signed EC certificate; a server
    one is valid for 127.0.0.1."""
    key = os.path.join(directory, name + ".key")
    pem = os.path.join(directory, name + ".pem")
    ext = ["-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"] \
        if server else ["-addext", "extendedKeyUsage=clientAuth"]
    subprocess.run([shutil.which("openssl") or "openssl", "req", "-x509",
                    "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key,
                    "-out", pem, "-days", "2", "-subj", "/CN=" + name, *ext],
                   check=True, capture_output=True)
    with open(pem, "rb") as f, open(key, "rb") as g:
        return pem, key, f.read(), g.read()


def tls_daemon(*flags):
    return Daemon(0, *flags)


def test_tls_and_mutual_tls(tmp_path):
    cert, key, cert_pem, _ = self_signed(str(tmp_path), "server", True)
    ccert, ckey, ccert_pem, ckey_pem = self_signed(str(tmp_path), "client",
                                                   False)
    d = tls_daemon("--tls-cert", cert, "--tls-key", key)
    try:
        with reshard.Client(d.target, root_certificates=cert_pem) as c:
            assert c.health() == "SERVING"
        with reshard.Client(d.target, timeout=2, retries=0) as plain:
            with pytest.raises(reshard.ReshardError) as err:
                plain.health()
            assert err.value.code == grpc.StatusCode.UNAVAILABLE
    finally:
        assert d.stop() == 0
    d = tls_daemon("--tls-cert", cert, "--tls-key", key, "--tls-client-ca",
                   ccert)
    try:
        with reshard.Client(d.target, root_certificates=cert_pem,
                            private_key=ckey_pem,
                            certificate_chain=ccert_pem) as c:
            assert c.health("reshard.v1.Planner") == "SERVING"
        with reshard.Client(d.target, root_certificates=cert_pem, timeout=2,
                            retries=0) as anonymous:
            with pytest.raises(reshard.ReshardError) as err:
                anonymous.health()
            assert err.value.code == grpc.StatusCode.UNAVAILABLE
    finally:
        assert d.stop() == 0


def test_client_certificate_needs_key_and_chain():
    with pytest.raises(ValueError, match="both private_key"):
        reshard.Client("127.0.0.1:1", private_key=b"key")
    with reshard.Client("127.0.0.1:1", secure=True) as c:
        assert c.target == "127.0.0.1:1"
