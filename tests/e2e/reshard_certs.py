"""Test certificates made with the openssl command line, never committed.

``CertAuthority(dir, name)`` creates a CA; ``ca.issue(name, server=True)``
writes ``name.pem`` and ``name.key`` signed by it, valid for 127.0.0.1,
::1 and localhost (server) or as a client certificate.
"""

import os
import shutil
import subprocess

OPENSSL = shutil.which("openssl")


def _run(*argv):
    if OPENSSL is None:
        raise RuntimeError("openssl is not installed: apt-get install "
                           "openssl (scripts/install-deps.sh does)")
    subprocess.run([OPENSSL, *argv], check=True, stdin=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _new_key(path):
    _run("genpkey", "-algorithm", "EC", "-pkeyopt",
         "ec_paramgen_curve:prime256v1", "-out", path)
    os.chmod(path, 0o600)


class CertAuthority:
    def __init__(self, directory, name="test-ca"):
        self.dir = directory
        self.name = name
        self.key = os.path.join(directory, name + ".key")
        self.pem = os.path.join(directory, name + ".pem")
        _new_key(self.key)
        _run("req", "-x509", "-new", "-key", self.key, "-out", self.pem,
             "-days", "2", "-subj", "/CN=" + name, "-addext",
             "basicConstraints=critical,CA:TRUE", "-addext",
             "keyUsage=critical,keyCertSign,cRLSign")

    def issue(self, name, server=True):
        """Returns (certificate path, key path)."""
        key = os.path.join(self.dir, name + ".key")
        pem = os.path.join(self.dir, name + ".pem")
        csr = os.path.join(self.dir, name + ".csr")
        ext = os.path.join(self.dir, name + ".ext")
        _new_key(key)
        _run("req", "-new", "-key", key, "-out", csr, "-subj", "/CN=" + name)
        with open(ext, "w") as f:
            if server:
                f.write("subjectAltName=IP:127.0.0.1,IP:::1,DNS:localhost\n"
                        "extendedKeyUsage=serverAuth\n")
            else:
                f.write("extendedKeyUsage=clientAuth\n")
        _run("x509", "-req", "-in", csr, "-CA", self.pem, "-CAkey", self.key,
             "-CAcreateserial", "-out", pem, "-days", "2", "-extfile", ext)
        os.unlink(csr)
        os.unlink(ext)
        return pem, key


def read(path):
    with open(path, "rb") as f:
        return f.read()
