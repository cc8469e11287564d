"""A throwaway redis-server on a free loopback port, for the catalog tests
and the catalog benchmark.

``RedisServer()`` picks a free port on 127.0.0.1 and ``start()`` runs
Debian's ``redis-server`` there without persistence (``--save ''
--appendonly no``), or with an append-only file fsynced on every write when
``durable=True`` (its data then survives ``stop()`` + ``start()``).
``stop()`` ends it (SIGTERM, or SIGKILL with ``kill=True``); ``cleanup()``
stops it and removes its directory. Nothing but this process is touched.
"""

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def page_bucket_key(domain, page_key):
    """The hash holding page_key's binding in domain (docs/catalog.md "Page
    bindings on Redis"): FNV-1a of the key's text, folded to one of 32 768
    buckets; "pages" for lowercase hex of even length (stored as its
    bytes), "pages-raw" for any other key."""
    h = 2166136261
    for byte in page_key.encode():
        h = ((h ^ byte) * 16777619) & 0xFFFFFFFF
    bucket = (h ^ (h >> 15)) % 32768
    packed = (0 < len(page_key) <= 1024 and len(page_key) % 2 == 0
              and all(c in "0123456789abcdef" for c in page_key))
    return "reshard:{%s}:%s:%d" % (domain, "pages" if packed else "pages-raw",
                                   bucket)


class RedisServer:
    def __init__(self, durable=False, port=None, password=None):
        self.binary = shutil.which("redis-server")
        if self.binary is None:
            raise RuntimeError(
                "redis-server is not installed: apt-get install redis-server "
                "(scripts/install-deps.sh does)")
        self.port = port or free_port()
        self.durable = durable
        self.password = password
        self.dir = tempfile.mkdtemp(prefix="reshard-redis-")
        self.proc = None

    @property
    def url(self):
        return "redis://127.0.0.1:%d" % self.port

    def start(self, timeout=10.0):
        argv = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1",
                "--dir", self.dir, "--save", "", "--logfile", "",
                "--loglevel", "warning"]
        if self.password is not None:
            argv += ["--requirepass", self.password]
        if self.durable:
            argv += ["--appendonly", "yes", "--appendfsync", "always"]
        else:
            argv += ["--appendonly", "no"]
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while not port_open(self.port):
            if self.proc.poll() is not None:
                raise RuntimeError("redis-server exited with %s on port %d"
                                   % (self.proc.returncode, self.port))
            if time.monotonic() > deadline:
                self.stop(kill=True)
                raise RuntimeError("redis-server did not listen on port %d"
                                   % self.port)
            time.sleep(0.02)
        return self

    def stop(self, kill=False):
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def cleanup(self):
        self.stop(kill=True)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.cleanup()
