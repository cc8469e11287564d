"""The harness of test_hostile.py: requests built on the wire by hand
(protobuf and HTTP/2 framing), a raw HTTP/2 connection, the daemon under
attack with its memory and metrics, the health prober, and the checks
(`attack` measures peak memory growth and health latency around one
attack)."""
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

LISTENING = re.compile(r"msg=listening address=(\S+)")
METRICS = re.compile(r"metrics_address=(\S+)")
MiB = 1 << 20
CALL_BOUND = 64 * MiB
# A flood on many connections holds every queue thread until the read
# guard closes them; gRPC keeps its calls meanwhile (docs/security.md).
FLOOD_BOUND = 1536 * MiB
HEALTH_BOUND_S = 0.100
HEALTH = "/grpc.health.v1.Health/Check"
PLANNER = "/reshard.v1.Planner/"
DOMAIN = "ab" * 32
# The entry point, which the worker processes run (its --worker flag).
ENTRY = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                     "test_hostile.py")

# ---- protobuf on the wire ----


def varint(value):
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def field(number, payload):
    """A length-delimited field."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def packed(values):
    return b"".join(varint(v) for v in values)


# ---- HTTP/2 by hand ----

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS = 0, 1, 3, 4
END_STREAM, END_HEADERS = 0x1, 0x4


def frame(kind, flags, stream, payload):
    return (struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) +
            struct.pack(">I", stream) + payload)


def hpack_int(value, prefix_bits, first=0):
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first | value])
    out = bytearray([first | limit])
    value -= limit
    while value >= 128:
        out.append(value % 128 + 128)
        value //= 128
    out.append(value)
    return bytes(out)


def hpack_literal(name, value):
    """Literal header field without indexing, new name, no Huffman."""
    name, value = name.encode(), value.encode()
    return (b"\x00" + hpack_int(len(name), 7) + name +
            hpack_int(len(value), 7) + value)


def grpc_headers(path, extra=()):
    pairs = [(":method", "POST"), (":scheme", "http"), (":path", path),
             (":authority", "localhost"), ("content-type", "application/grpc"),
             ("te", "trailers")] + list(extra)
    return b"".join(hpack_literal(n, v) for n, v in pairs)


def grpc_message(payload, compressed=False):
    return bytes([1 if compressed else 0]) + struct.pack(">I",
                                                         len(payload)) + payload


class RawConnection:
    """One HTTP/2 connection that answers nothing the server sends (no
    SETTINGS ack, no PING ack): the attacker's socket."""

    def __init__(self, address, ack_settings=True):
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.sock.sendall(PREFACE + frame(SETTINGS, 0, 0, b""))
        self.next_stream = 1
        if ack_settings:
            # The stream cap binds once the client has acknowledged it.
            self.read_until_settings()
            self.sock.sendall(frame(SETTINGS, 1, 0, b""))

    def read_until_settings(self):
        buffered = b""
        while True:
            while len(buffered) >= 9:
                length = int.from_bytes(buffered[:3], "big")
                if buffered[3] == SETTINGS and not buffered[4] & 1:
                    return
                buffered = buffered[9 + length:]
            chunk = self.sock.recv(65536)
            if not chunk:
                raise RuntimeError("connection closed before SETTINGS")
            buffered += chunk

    def stream(self):
        stream = self.next_stream
        self.next_stream += 2
        return stream

    def send(self, data):
        self.sock.sendall(data)

    def closed_within(self, seconds):
        """True when the server closes the connection within `seconds`."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.05, deadline - time.monotonic()))
            try:
                if not self.sock.recv(65536):
                    return True
            except socket.timeout:
                return False
            except OSError:
                return True
        return False

    def close(self):
        self.sock.close()


# ---- the daemon ----


DAEMONS = []  # every daemon started, for the final checks
SANITIZER_REPORT = re.compile(r"ERROR: (Address|Leak)Sanitizer|runtime error:")


class Daemon:
    def __init__(self, binary, *args, prefix=(), catalog="memory", cwd=None):
        self.proc = subprocess.Popen(
            list(prefix) + [binary, "--listen", "127.0.0.1:0", "--catalog",
                            catalog, "--metrics-listen", "127.0.0.1:0"] +
            list(args),
            stderr=subprocess.PIPE, text=True, cwd=cwd)
        DAEMONS.append(self)
        self.lines = []
        self.address = self.metrics = None
        ready = threading.Event()

        def pump():
            for line in self.proc.stderr:
                self.lines.append(line.rstrip("\n"))
                match = LISTENING.search(line)
                if match and self.address is None:
                    self.address = match.group(1)
                match = METRICS.search(line)
                if match:
                    self.metrics = match.group(1)
                    ready.set()
            ready.set()

        threading.Thread(target=pump, daemon=True).start()
        if not ready.wait(10) or self.address is None:
            self.proc.kill()
            raise RuntimeError("reshardd did not start:\n" +
                               "\n".join(self.lines))
        import grpc
        self.channel = grpc.insecure_channel(
            self.address, options=[("grpc.max_send_message_length", -1),
                                   ("grpc.max_receive_message_length", -1)])

    def status(self, key):
        with open("/proc/%d/status" % self.proc.pid) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
        raise KeyError(key)

    def reset_peak(self):
        """VmHWM restarts from the current resident size."""
        with open("/proc/%d/clear_refs" % self.proc.pid, "w") as f:
            f.write("5")
        return self.status("VmRSS")

    def call(self, method, payload, timeout=10):
        """Sends raw request bytes; returns (code name, details)."""
        import grpc
        fn = self.channel.unary_unary(method,
                                      request_serializer=lambda b: b,
                                      response_deserializer=lambda b: b)
        try:
            fn(payload, timeout=timeout)
            return "OK", ""
        except grpc.RpcError as error:
            return error.code().name, error.details()

    def call_apart(self, method, payload, timeout=30):
        """Like call, from a worker process: a client moving megabytes
        must not slow the prober, which shares this interpreter."""
        with tempfile.NamedTemporaryFile() as f:
            f.write(payload)
            f.flush()
            done = subprocess.run(
                [sys.executable, ENTRY, "--worker", "call", "--address",
                 self.address, "--method", method, "--payload", f.name],
                capture_output=True, text=True, timeout=timeout + 30)
        code, _, details = done.stdout.rstrip("\n").partition(" ")
        return code, details

    def metric(self, name, **labels):
        """The sum of the series `name` whose labels include `labels`."""
        import urllib.request
        with urllib.request.urlopen("http://%s/metrics" % self.metrics,
                                    timeout=5) as response:
            text = response.read().decode()
        wanted = ['%s="%s"' % item for item in labels.items()]
        total = 0.0
        for line in text.splitlines():
            series, _, value = line.rpartition(" ")
            if (series.split("{")[0] == name and
                    all(w in series for w in wanted)):
                total += float(value)
        return total

    def stop(self, sig=signal.SIGTERM, timeout=30):
        self.channel.close()
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            self.exit_code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            self.exit_code = None
        return self.exit_code


class HealthProbe:
    """Checks health every 10 ms on its own channel while an attack runs."""

    def __init__(self, address):
        import grpc
        self.channel = grpc.insecure_channel(address)
        self.check = self.channel.unary_unary(
            HEALTH, request_serializer=lambda b: b,
            response_deserializer=lambda b: b)
        self.check(b"", timeout=5)  # connected before the attack starts
        self.latencies, self.failures = [], 0
        self.running = True
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while self.running:
            start = time.monotonic()
            try:
                self.check(b"", timeout=2)
            except Exception:  # noqa: BLE001 - any failure counts
                self.failures += 1
            self.latencies.append(time.monotonic() - start)
            time.sleep(0.01)

    def stop(self):
        self.running = False
        self.thread.join()
        self.channel.close()
        return max(self.latencies), self.failures, len(self.latencies)


# ---- the harness ----


class Outcome:
    def __init__(self, sanitized):
        self.sanitized = sanitized
        self.passed = self.failed = 0

    def check(self, name, condition, detail):
        print("%-5s %s: %s" % ("ok" if condition else "FAIL", name, detail))
        sys.stdout.flush()
        if condition:
            self.passed += 1
        else:
            self.failed += 1


def attack(out, daemon, name, fn, calls=1, bound=None):
    """Runs `fn` under the prober; checks memory growth and health. The
    memory bound is deterministic; latency on a shared 2-core machine is
    not, so an attack whose only miss is latency runs once more and the
    second run decides (both are printed)."""
    limit = bound if bound is not None else calls * CALL_BOUND
    first = measure(daemon, fn)
    growth, worst, failures, probes, elapsed = first
    if (not out.sanitized and growth < limit and failures == 0 and
            worst >= HEALTH_BOUND_S):
        print("note  %s: health worst %.1f ms, running it again" %
              (name, worst * 1000))
        growth, worst, failures, probes, elapsed = measure(daemon, fn)
        growth = max(growth, first[0])
    detail = ("peak growth %.1f MiB (bound %.0f MiB), health worst %.1f ms "
              "over %d checks, %d failed, attack %.2f s" %
              (growth / MiB, limit / MiB, worst * 1000, probes, failures,
               elapsed))
    if out.sanitized:
        out.check(name + " (sanitized: figures only)", failures == 0, detail)
    else:
        out.check(name, growth < limit and worst < HEALTH_BOUND_S and
                  failures == 0, detail)
    out.check(name + ": daemon alive", daemon.proc.poll() is None and
              daemon.call(HEALTH, b"")[0] == "OK", "health OK afterwards")


def measure(daemon, fn):
    base = daemon.reset_peak()
    probe = HealthProbe(daemon.address)
    start = time.monotonic()
    try:
        fn()
        time.sleep(0.3)  # a stall after the answer counts too
    finally:
        worst, failures, probes = probe.stop()
    elapsed = time.monotonic() - start
    return daemon.status("VmHWM") - base, worst, failures, probes, elapsed


def expect(out, name, got, code, needle=""):
    out.check(name, got[0] == code and needle in got[1],
              "%s %r (want %s %r)" % (got[0], got[1][:160], code, needle))
