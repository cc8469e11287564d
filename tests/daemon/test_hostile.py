#!/usr/bin/env python3
"""Hostile input against a live reshardd (issue 13, docs/security.md).

Each class of attack that once took the daemon down is sent again, on
loopback, to a freshly started daemon, while a prober measures the health
check's latency; the daemon's peak resident memory (VmHWM, reset through
/proc/PID/clear_refs before each attack) gives the growth the attack
caused. Bounds: peak growth under 64 MiB per hostile call, health answering
within 100 ms, the expected status, and the daemon alive afterwards.
Under sanitizers (--sanitized) memory and latency are printed, not bounded:
ASan's shadow and quarantine are not the daemon's.

Requests are built on the wire by hand (protobuf and HTTP/2 framing), as an
attacker would; grpcio sends the well-formed ones with identity
serializers, raw sockets the rest.

Usage: test_hostile.py --reshardd PATH [--sanitized] [--only NAME]
"""
import argparse
import os
import re
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zlib

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
                [sys.executable, __file__, "--worker", "call", "--address",
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


# ---- the classes ----


def repeated_singular(out, binary):
    """PlanLoad whose singular `binding` occurs 40 000 times (160 KB)."""
    daemon = Daemon(binary)
    one = field(6, field(4, b""))
    payload = field(1, DOMAIN.encode()) + one * 40000
    result = []
    attack(out, daemon, "repeated singular field",
           lambda: result.append(daemon.call(PLANNER + "PlanLoad", payload)))
    expect(out, "repeated singular field: status", result[0],
           "INVALID_ARGUMENT", "PlanLoadRequest.binding: occurs more than once")
    daemon.stop()


def identity_blowup(out, binary):
    """RegisterPlacement of N parts over a descriptor of N layers."""
    daemon = Daemon(binary)
    for n in (20000, 100000):
        descriptor = field(1, packed(range(n))) + field(2, b"bf16")
        part = field(1, b"p")
        placement = field(6, descriptor) + field(7, part) * n
        payload = field(1, placement)
        result = []
        attack(out, daemon, "identity blow-up %d x %d (%d KB)" %
               (n, n, len(payload) // 1000),
               lambda: result.append(
                   daemon.call(PLANNER + "RegisterPlacement", payload)))
        expect(out, "identity blow-up %d: status" % n, result[0],
               "RESOURCE_EXHAUSTED", "max_layout_fragments")
    daemon.stop()


def tiny_elements(out, binary):
    """12 MiB requests (under the default --max-request-bytes) of empty
    elements: ranges, page keys, unknown fields."""
    daemon = Daemon(binary)
    size = 12 * MiB
    cases = [
        ("empty binding ranges", "PlanLoad",
         field(6, b"\x22\x00" * (size // 2)), "max_ranges"),
        ("empty binding ranges", "PlanStore",
         field(5, b"\x22\x00" * (size // 2)), "max_ranges"),
        ("empty page keys", "RegisterPages",
         field(1, b"kv") + b"\x12\x00" * (size // 2), "max_page_keys"),
        ("unknown fields", "PlanLoad", b"\xf8\x01\x00" * (size // 3),
         "would take more than"),
    ]
    for name, method, payload, needle in cases:
        result = []
        attack(out, daemon, "tiny elements: " + name,
               lambda: result.append(daemon.call_apart(PLANNER + method,
                                                       payload)))
        expect(out, "tiny elements: %s: status" % name, result[0],
               "RESOURCE_EXHAUSTED", needle)
    daemon.stop()


def distinct_region_ids(out, binary):
    """As many ranges as --max-ranges allows, each naming a region id of
    its own: the binding decoder keeps one copy of every distinct id (a
    table that grows with them), for PlanLoad and PlanStore alike."""
    daemon = Daemon(binary)
    ranges = b"".join(field(4, field(7, b"region-%06d" % i))
                      for i in range(100000))
    for name, method, binding_field in (("PlanLoad", "PlanLoad", 6),
                                        ("PlanStore", "PlanStore", 5)):
        result = []
        attack(out, daemon, "distinct region ids: " + name,
               lambda: result.append(daemon.call_apart(
                   PLANNER + method, field(binding_field, ranges))))
        expect(out, "distinct region ids: %s: status" % name, result[0],
               "INVALID_ARGUMENT")
    daemon.stop()


def compression_bomb(out, binary):
    """Six gzip requests of ~1 MB inflating to 1 GiB each, at once."""
    daemon = Daemon(binary)
    compressor = zlib.compressobj(1, zlib.DEFLATED, 31)
    zeros = bytes(16 * MiB)
    bomb = b"".join(compressor.compress(zeros) for _ in range(64))
    bomb += compressor.flush()
    connections = []

    def send_all():
        message = grpc_message(bomb, compressed=True)
        for conn in [RawConnection(daemon.address) for _ in range(6)]:
            stream = conn.stream()
            try:
                conn.send(frame(HEADERS, END_HEADERS, stream, grpc_headers(
                    PLANNER + "PlanLoad", [("grpc-encoding", "gzip")])))
                for at in range(0, len(message), 16384):
                    chunk = message[at:at + 16384]
                    last = at + 16384 >= len(message)
                    conn.send(frame(DATA, END_STREAM if last else 0, stream,
                                    chunk))
            except OSError:
                pass  # refused: the daemon reset the stream or connection
            connections.append(conn)
        time.sleep(1.0)  # let the daemon take them in

    attack(out, daemon, "compression bomb (6 x %d KB -> 1 GiB)" %
           (len(bomb) // 1000), send_all, calls=6)
    for conn in connections:
        conn.close()
    # What a client sending gzip is told: gRPC core refuses the encoding
    # before the message reaches a handler.
    import grpc
    gzip = grpc.insecure_channel(daemon.address,
                                 compression=grpc.Compression.Gzip)
    fn = gzip.unary_unary(PLANNER + "PlanLoad", request_serializer=lambda b: b,
                          response_deserializer=lambda b: b)
    try:
        fn(field(1, bytes(100000)), timeout=5)
        got = ("OK", "")
    except grpc.RpcError as error:
        got = (error.code().name, error.details())
    gzip.close()
    expect(out, "compression bomb: gzip refused", got, "UNIMPLEMENTED",
           "'gzip' is disabled")
    daemon.stop()


def forget_many(address, count):
    """Worker process: `count` concurrent 4 MiB ForgetPages of pages nobody
    registered (OK, removed 0)."""
    keys = [("k%06d" % i).ljust(120, "x").encode() for i in range(32000)]
    payload = field(1, DOMAIN.encode()) + b"".join(field(2, k) for k in keys)
    concurrent_calls(address, "ForgetPages", payload, count)


def concurrent_calls(address, method, payload, count):
    """Sends `payload` to `method` `count` times at once; prints each
    status code."""
    import grpc
    channel = grpc.insecure_channel(
        address, options=[("grpc.max_send_message_length", -1),
                          ("grpc.max_receive_message_length", -1)])
    fn = channel.unary_unary(PLANNER + method,
                             request_serializer=lambda b: b,
                             response_deserializer=lambda b: b)
    codes = []

    def one():
        try:
            fn(payload, timeout=60)
            codes.append("OK")
        except grpc.RpcError as error:
            codes.append(error.code().name)

    threads = [threading.Thread(target=one) for _ in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(" ".join(codes))


def calls_in_flight(out, binary):
    """32 concurrent 4 MiB calls under --max-inflight-bytes 32M: they wait
    their turn and memory stays under the budget + a fixed overhead. The
    client runs in its own process so the prober measures the daemon."""
    budget = 32 * MiB
    daemon = Daemon(binary, "--max-inflight-bytes", "32M",
                    "--max-request-bytes", "4M")
    results = []

    def many():
        done = subprocess.run(
            [sys.executable, __file__, "--worker", "forget_many",
             "--address", daemon.address, "--count", "32"],
            capture_output=True, text=True, timeout=120)
        results.extend(done.stdout.split())

    attack(out, daemon, "32 concurrent 4 MiB calls, 32 MiB in-flight budget",
           many, bound=budget + 32 * MiB)
    codes = sorted(set(results))
    out.check("calls in flight: every call answered", codes == ["OK"] and
              len(results) == 32, "%d answered, codes %s" % (len(results),
                                                              codes))
    daemon.stop()


REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def plan_many(address, count, pygen):
    """Worker process: publishes S1 with 128 pages (131 072 copies per
    plan, a 1.4 MB response), then `count` concurrent PlanLoads; prints each
    status code."""
    os.environ["RESHARD_E2E_PYGEN"] = pygen
    sys.path[:0] = [os.path.join(REPO, "tests", "e2e"),
                    os.path.join(REPO, "scripts")]
    import load
    import reshard_scenarios
    requests = reshard_scenarios.build("S1", 128)
    load.set_up(address, requests)
    concurrent_calls(address, "PlanLoad",
                     requests.plan_load.SerializeToString(), count)


def concurrent_plans(out, binary, pygen):
    """32 concurrent plans of 131 072 copies under --max-inflight-bytes
    64M: each plan's memory is granted before it is planned."""
    if pygen is None:
        print("skip  concurrent plans: no generated Python messages (--pygen)")
        return
    budget = 64 * MiB
    daemon = Daemon(binary, "--max-inflight-bytes", "64M")
    results = []

    def many():
        done = subprocess.run(
            [sys.executable, __file__, "--worker", "plan_many", "--address",
             daemon.address, "--count", "32", "--pygen", pygen],
            capture_output=True, text=True, timeout=180)
        results.extend(done.stdout.split())
        if not results:
            print(done.stderr[-2000:])

    attack(out, daemon, "32 concurrent plans of 131 072 copies, 64 MiB "
           "in-flight budget", many, bound=budget + 32 * MiB)
    out.check("concurrent plans: every plan answered",
              results == ["OK"] * 32, "%d answered, codes %s" %
              (len(results), sorted(set(results))))
    daemon.stop()


def plan_request(address, path, pygen):
    """Worker process: publishes S1 with 8 pages (8 192 copies, a 92 KB
    response) and writes its PlanLoad request's bytes to `path`."""
    os.environ["RESHARD_E2E_PYGEN"] = pygen
    sys.path[:0] = [os.path.join(REPO, "tests", "e2e"),
                    os.path.join(REPO, "scripts")]
    import load
    import reshard_scenarios
    requests = reshard_scenarios.build("S1", 8)
    load.set_up(address, requests)
    with open(path, "wb") as f:
        f.write(requests.plan_load.SerializeToString())


def unread_plans(daemon, payload, connections, per_connection, headers=()):
    """PlanLoads from connections that set their flow-control window to 0
    (SETTINGS_INITIAL_WINDOW_SIZE) and never open it: the daemon plans
    them and cannot send a byte of their responses."""
    block = grpc_headers(PLANNER + "PlanLoad", headers)
    message = grpc_message(payload)
    socks = []
    for _ in range(connections):
        host, port = daemon.address.rsplit(":", 1)
        sock = socket.create_connection((host, int(port)), timeout=10)
        data = PREFACE + frame(SETTINGS, 0, 0, struct.pack(">HI", 4, 0))
        for i in range(per_connection):
            stream = 1 + 2 * i
            data += frame(HEADERS, END_HEADERS, stream, block)
            for at in range(0, len(message), 16384):
                last = at + 16384 >= len(message)
                data += frame(DATA, END_STREAM if last else 0, stream,
                              message[at:at + 16384])
        sock.sendall(data)
        socks.append(sock)
    return socks


def unread_responses(out, binary, pygen):
    """Clients that send PlanLoads and never take the responses. gRPC
    cannot end such a call: it ends at the default deadline, and, with a
    deadline of its own far off, 10 s after it was answered while other
    calls wait for in-flight room; a client that reads is served."""
    if pygen is None:
        print("skip  unread responses: no generated Python messages (--pygen)")
        return

    def start(*args):
        daemon = Daemon(binary, *args)
        with tempfile.NamedTemporaryFile() as f:
            subprocess.run(
                [sys.executable, __file__, "--worker", "plan_request",
                 "--address", daemon.address, "--payload", f.name,
                 "--pygen", pygen], check=True, timeout=120)
            return daemon, f.read()

    def deadline_exceeded(daemon):
        return daemon.metric("reshard_requests_total", method="PlanLoad",
                             code="DEADLINE_EXCEEDED")

    daemon, payload = start("--default-deadline", "2s")
    socks = unread_plans(daemon, payload, 4, 2)
    time.sleep(1)
    held = daemon.metric("reshard_inflight_bytes")
    time.sleep(2.5)
    ended = deadline_exceeded(daemon)
    left = daemon.metric("reshard_inflight_bytes")
    out.check("unread responses: ended at the default deadline",
              held > 0 and ended == 8 and left == 0,
              "%.1f MiB held after 1 s; after 3.5 s %d of 8 DEADLINE_EXCEEDED, "
              "%.1f MiB held (--default-deadline 2s)" %
              (held / MiB, ended, left / MiB))
    for sock in socks:
        sock.close()
    daemon.stop()

    daemon, payload = start("--max-inflight-bytes", "16M",
                            "--max-request-bytes", "1M",
                            "--default-deadline", "0")
    socks = []
    served = []

    def hold_and_call():
        socks.extend(unread_plans(daemon, payload, 4, 2,
                                  [("grpc-timeout", "99999999S")]))
        time.sleep(1)
        served.append(daemon.metric("reshard_inflight_waiting_calls"))
        start_s = time.monotonic()
        served.append(daemon.call(PLANNER + "PlanLoad", payload, timeout=40))
        served.append(time.monotonic() - start_s)

    attack(out, daemon, "unread responses filling a 16 MiB in-flight budget",
           hold_and_call, bound=CALL_BOUND)
    waiting, got, took = served
    cut = deadline_exceeded(daemon)
    out.check("unread responses: a reading client is served",
              waiting > 0 and got == ("OK", "") and took < 40 and cut >= 1,
              "%d unread calls waiting for room; the reading client's "
              "PlanLoad %s after %.1f s; %d unread calls ended "
              "DEADLINE_EXCEEDED" % (waiting, got[0], took, cut))
    for sock in socks:
        sock.close()
    daemon.stop()


def reset_flood(address, seconds, ended):
    """One connection that opens streams and resets them at once (HTTP/2
    rapid reset, CVE-2023-44487) for `seconds`; appends to `ended` how it
    ended: "closed" when the daemon closed it, "timeout" when sending
    stalled for 2 s (the daemon stopped reading it, or shut it down and has
    not closed it yet), "done" when the flood ran its course. Returns the
    streams sent."""
    block = grpc_headers(PLANNER + "PlanLoad")
    conn = RawConnection(address)
    conn.sock.settimeout(2)

    def drain():
        try:
            while conn.sock.recv(1 << 20):
                pass
        except OSError:
            pass

    threading.Thread(target=drain, daemon=True).start()
    stream, stop, sent = 1, time.monotonic() + seconds, 0
    how = "done"
    try:
        while time.monotonic() < stop:
            conn.send(b"".join(
                frame(HEADERS, END_HEADERS, stream + 2 * i, block) +
                frame(RST_STREAM, 0, stream + 2 * i, struct.pack(">I", 8))
                for i in range(100)))
            stream += 200
            sent += 100
    except socket.timeout:
        how = "timeout"
    except OSError:
        how = "closed"
    ended.append(how)
    conn.close()
    return sent


def rapid_reset(out, binary):
    """One connection that opens streams and resets them at once: gRPC
    1.51 keeps each such stream as a call until the daemon takes it, and a
    single connection once grew the daemon by 2.6 GiB in six seconds. The
    daemon closes a connection past 1 000 such resets a second
    (daemon/guard/reset_guard.c)."""
    daemon = Daemon(binary)
    sent, ended = [0], []

    def flood():
        sent[0] = reset_flood(daemon.address, 5, ended)

    # The flood's calls live until the loop ends them: 10-31 MiB at their
    # peak over a dozen runs, once 74 MiB; unguarded, gigabytes.
    attack(out, daemon, "rapid reset (HEADERS + RST_STREAM, one connection)",
           flood, bound=2 * CALL_BOUND)
    logged, counted = flood_closings(daemon)
    out.check("rapid reset: the connection is closed",
              ended in (["closed"], ["timeout"]) and logged == 1 and
              counted == 1,
              "%d streams sent and reset; the connection ended: %s; "
              "%d closing logged, %d counted" % (sent[0], ended, logged,
                                                 counted))
    daemon.stop()


def large_requests(out, binary):
    """Requests of the largest size on four connections at once, eight
    each (h2load, which sends them as fast as the windows allow): reading
    them holds the queue threads for a while without a completion, as a
    flood does, but at the pace of requests. The read guard closes
    nothing; a first version without its rates closed all four connections
    in 115 ms (docs/security.md)."""
    h2load = shutil.which("h2load")
    if h2load is None:
        out.check("requests of the largest size", False,
                  "h2load is missing (apt-get install nghttp2-client)")
        return
    daemon = Daemon(binary)
    message = field(1, b"a" * (15 * MiB))  # a model domain no catalog has
    with tempfile.NamedTemporaryFile() as body:
        body.write(b"\x00" + struct.pack(">I", len(message)) + message)
        body.flush()
        for _ in range(3):
            subprocess.run(
                [h2load, "-n", "96", "-c", "4", "-m", "8", "-t", "2",
                 "-d", body.name, "-H", "content-type: application/grpc",
                 "-H", "te: trailers",
                 "http://%s%sPlanLoad" % (daemon.address, PLANNER)],
                capture_output=True, timeout=120, check=True)
    # A call gRPC ended with its connection counts as CANCELLED; a slow
    # (sanitized) daemon may end one waiting for room past 1 s instead. A
    # call is counted once its status went out, after h2load saw it.
    stop = time.monotonic() + 5
    while (daemon.metric("reshard_requests_total", method="PlanLoad") <
           3 * 96 and time.monotonic() < stop):
        time.sleep(0.1)
    answered = daemon.metric("reshard_requests_total", method="PlanLoad")
    refused = daemon.metric("reshard_requests_total", method="PlanLoad",
                            code="INVALID_ARGUMENT")
    cancelled = daemon.metric("reshard_requests_total", method="PlanLoad",
                              code="CANCELLED")
    closed = daemon.metric("reshard_read_flood_connections_closed_total")
    out.check("requests of the largest size: none taken for a flood",
              answered == 3 * 96 and cancelled == 0 and closed == 0,
              "%d of %d answered, %d INVALID_ARGUMENT, %d CANCELLED; %d "
              "connections closed by the read guard" %
              (answered, 3 * 96, refused, cancelled, closed))
    daemon.stop()


def flood_closings(daemon):
    """Connections closed by the reset and read guards: as logged, and as
    counted by the metrics."""
    logged = sum("HTTP/2 rapid reset" in line for line in daemon.lines)
    logged += sum(int(re.search(r" closed=(\d+)", line).group(1))
                  for line in daemon.lines if "without end" in line)
    counted = (
        daemon.metric("reshard_reset_flood_connections_closed_total") +
        daemon.metric("reshard_read_flood_connections_closed_total"))
    return logged, counted


def rapid_reset_connections(out, binary):
    """Rapid reset on four connections at once: every queue thread is held
    reading one, no event reaches the loop and the reset guard sees
    nothing (before the read guard: +5.8 GiB in 10 s, health checks timing
    out). The daemon shuts the connections down (daemon/guard/read_guard.c) and
    gives the memory their calls held back to the system."""
    daemon = Daemon(binary)
    base = daemon.status("VmRSS")
    ended, sent = [], []

    def flood():
        threads = [threading.Thread(
            target=lambda: sent.append(reset_flood(daemon.address, 3, ended)))
            for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    growth, worst, failures, probes, elapsed = measure(daemon, flood)
    detail = ("%d streams sent and reset; peak growth %.1f MiB (bound %.0f "
              "MiB), health worst %.1f ms over %d checks, %d failed" %
              (sum(sent), growth / MiB, FLOOD_BOUND / MiB, worst * 1000,
               probes, failures))
    name = "rapid reset on four connections"
    if out.sanitized:
        out.check(name + " (sanitized: figures only)", failures == 0, detail)
    else:
        out.check(name, growth < FLOOD_BOUND and failures == 0, detail)
    # Which guard closes which depends on whether the threads were held at
    # the time; without the read guard none is closed until the flood ends.
    read = daemon.metric("reshard_read_flood_connections_closed_total")
    logged, counted = flood_closings(daemon)
    out.check(name + ": the connections are closed",
              len(ended) == 4 and "done" not in ended and counted == 4 and
              logged == 4,
              "the connections ended: %s; %d closed, %d of them by the read "
              "guard; %d closings logged" % (sorted(ended), counted, read,
                                             logged))
    if not out.sanitized:
        # The sanitizer's allocator keeps what it frees in quarantine. The
        # daemon gives memory back 2 s after the last closing, and again
        # every 2 s while calls (the flood's backlog) still arrive.
        waited, rest = 0.0, daemon.status("VmRSS") - base
        while rest >= CALL_BOUND and waited < 12:
            time.sleep(0.5)
            waited += 0.5
            rest = daemon.status("VmRSS") - base
        out.check(name + ": the memory is given back", rest < CALL_BOUND,
                  "%.1f MiB above the start, after waiting %.1f s"
                  % (rest / MiB, waited))
    out.check(name + ": daemon alive", daemon.proc.poll() is None and
              daemon.call(HEALTH, b"")[0] == "OK", "health OK afterwards")
    daemon.stop()


def idle_streams(out, binary):
    """10 connections x 100 HEADERS-only streams end at the default
    deadline as DEADLINE_EXCEEDED; a connection opening more streams than
    the cap is refused; streams held across SIGTERM do not hold the
    drain."""
    daemon = Daemon(binary, "--default-deadline", "2s", "--log-level", "info",
                    "--drain-timeout", "20s")
    connections = []
    block = grpc_headers(PLANNER + "PlanLoad")

    def open_streams():
        for _ in range(10):
            conn = RawConnection(daemon.address)
            conn.send(b"".join(frame(HEADERS, END_HEADERS, conn.stream(),
                                     block) for _ in range(100)))
            connections.append(conn)
        time.sleep(0.5)

    attack(out, daemon, "idle streams (10 x 100 HEADERS-only)", open_streams,
           bound=CALL_BOUND)
    time.sleep(2.5)
    # The few admitted to read their request end DEADLINE_EXCEEDED, those
    # waiting for in-flight room behind them RESOURCE_EXHAUSTED.
    ended = daemon.metric("reshard_requests_total", method="PlanLoad",
                          code="DEADLINE_EXCEEDED")
    refused = daemon.metric("reshard_requests_total", method="PlanLoad",
                            code="RESOURCE_EXHAUSTED")
    total = daemon.metric("reshard_requests_total", method="PlanLoad")
    out.check("idle streams: ended by the default deadline",
              ended + refused == 1000 and total == 1000,
              "%d DEADLINE_EXCEEDED + %d RESOURCE_EXHAUSTED of %d (want 1000)"
              % (ended, refused, total))
    got = daemon.call(PLANNER + "ForgetPages", field(1, DOMAIN.encode()))
    expect(out, "idle streams: served again once they ended", got, "OK")

    over = RawConnection(daemon.address)
    over.send(b"".join(frame(HEADERS, END_HEADERS, over.stream(), block)
                       for _ in range(150)))
    time.sleep(0.5)
    started = daemon.metric("reshard_requests_total", method="PlanLoad")
    started += daemon.metric("reshard_calls_in_flight")
    out.check("idle streams: at most 100 streams per connection",
              1000 < started <= 1000 + 100, "%d calls for 150 streams "
              "opened at once on one connection" % (started - 1000))
    over.close()

    for conn in connections:  # a fresh set, held across SIGTERM
        conn.send(b"".join(frame(HEADERS, END_HEADERS, conn.stream(), block)
                           for _ in range(50)))
    time.sleep(0.3)
    start = time.monotonic()
    code = daemon.stop()
    took = time.monotonic() - start
    out.check("idle streams: SIGTERM does not wait for them",
              code == 0 and took < 15, "exit %s after %.1f s (drain timeout "
              "20 s)" % (code, took))
    for conn in connections:
        conn.close()


def descriptors(out, binary):
    """More connections than descriptors, then all closed: the listener
    must serve again."""
    daemon = Daemon(binary, prefix=["prlimit", "--nofile=96:96"])
    socks = []
    for _ in range(150):
        try:
            socks.append(socket.create_connection(
                tuple(daemon.address.rsplit(":", 1)[:1]) +
                (int(daemon.address.rsplit(":", 1)[1]),), timeout=2))
        except OSError:
            break
    time.sleep(1.0)
    for s in socks:
        s.close()
    time.sleep(0.5)
    import grpc
    fresh = grpc.insecure_channel(daemon.address)
    check = fresh.unary_unary(HEALTH, request_serializer=lambda b: b,
                              response_deserializer=lambda b: b)
    try:
        check(b"", timeout=5, wait_for_ready=True)
        served = True
    except grpc.RpcError:
        served = False
    fresh.close()
    warned = any("out of file descriptors" in line for line in daemon.lines)
    out.check("descriptors: listener serves again after EMFILE", served and
              warned, "%d connections with a limit of 96; new connection "
              "served: %s; EMFILE logged: %s" % (len(socks), served, warned))
    daemon.stop()


def half_headers(out, binary):
    """HEADERS without END_HEADERS: the connection is closed by keepalive."""
    daemon = Daemon(binary, "--keepalive-time", "1s", "--keepalive-timeout",
                    "1s")
    conn = RawConnection(daemon.address)
    conn.send(frame(HEADERS, 0, conn.stream(),
                    grpc_headers(PLANNER + "PlanLoad")))
    closed = conn.closed_within(10)
    out.check("half-sent headers: connection closed", closed,
              "closed within 10 s with keepalive 1 s + 1 s: %s" % closed)
    conn.close()
    daemon.stop()


def cancelled(out, binary):
    """A call the client resets is CANCELLED in logs and metrics."""
    daemon = Daemon(binary, "--log-level", "debug")
    conn = RawConnection(daemon.address)
    stream = conn.stream()
    conn.send(frame(HEADERS, END_HEADERS, stream,
                    grpc_headers(PLANNER + "PlanLoad")))
    time.sleep(0.2)
    conn.send(frame(RST_STREAM, 0, stream, struct.pack(">I", 8)))  # CANCEL
    time.sleep(0.5)
    logged = [line for line in daemon.lines if "msg=rpc" in line and
              "PlanLoad" in line]
    counted = daemon.metric("reshard_requests_total", method="PlanLoad", code="CANCELLED")
    out.check("cancelled call: CANCELLED", len(logged) == 1 and
              "code=CANCELLED" in logged[0] and counted == 1,
              "log %s; metric %d" % (logged, counted))
    conn.close()
    daemon.stop()


def signals(out, binary):
    daemon = Daemon(binary)
    for sig in (signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        daemon.proc.send_signal(sig)
    time.sleep(0.3)
    alive = daemon.proc.poll() is None and daemon.call(HEALTH, b"")[0] == "OK"
    out.check("SIGHUP, SIGUSR1, SIGUSR2: logged, serving", alive and any(
        "signal=SIGHUP" in line for line in daemon.lines), "alive: %s" % alive)
    code = daemon.stop(signal.SIGQUIT)
    out.check("SIGQUIT: drains and exits 0", code == 0 and any(
        "msg=draining" in line for line in daemon.lines), "exit %s" % code)


def lmdb_files(out, binary):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "catalog")
        daemon = Daemon(binary, catalog="lmdb:" + path)
        daemon.stop()
        modes = {name: stat.S_IMODE(os.stat(os.path.join(path, name)).st_mode)
                 for name in os.listdir(path)}
        directory = stat.S_IMODE(os.stat(path).st_mode)
        out.check("LMDB files 0600 in a 0700 directory",
                  directory == 0o700 and modes and
                  all(m == 0o600 for m in modes.values()),
                  "directory %o, files %s" % (directory, {
                      k: "%o" % v for k, v in modes.items()}))


def disk_full(out, binary):
    """RegisterPages into an LMDB catalog on a full filesystem."""
    with tempfile.TemporaryDirectory() as mount:
        if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs",
                           mount], capture_output=True).returncode != 0:
            print("skip  disk full: cannot mount a small tmpfs here")
            return
        try:
            daemon = Daemon(binary, catalog="lmdb:" + mount + "/catalog")
            manifest = publish_manifest(daemon)
            result = ("OK", "")
            for batch in range(200):
                keys = b"".join(field(2, ("p%d-%d" % (batch, i)).ljust(
                    200, "k").encode()) for i in range(1000))
                result = daemon.call(PLANNER + "RegisterPages",
                                     field(1, manifest) + keys)
                if result[0] != "OK":
                    break
            expect(out, "disk full: status", result, "RESOURCE_EXHAUSTED",
                   "the disk is full")
            errors = [line for line in daemon.lines if "level=error" in line]
            out.check("disk full: not logged as an error", not errors,
                      "%d error lines" % len(errors))
            daemon.stop()
        finally:
            subprocess.run(["umount", mount])


def publish_manifest(daemon):
    """Publishes a small manifest through grpcio; returns its key."""
    descriptor = (field(1, packed([0, 1])) + field(2, b"bf16") +
                  b"\x18\x02\x20\x10\x28\x02\x30\x08\x38\x08")
    shard = field(1, packed([0, 1])) + b"\x18\x02" + field(4, b"0")
    layout = field(1, descriptor) + b"\x10\x02" + field(3, shard)
    manifest = (field(1, b"ns") + field(2, b"m") + field(3, b"r") +
                field(4, b"f") + field(5, layout))
    fn = daemon.channel.unary_unary(PLANNER + "PublishManifest",
                                    request_serializer=lambda b: b,
                                    response_deserializer=lambda b: b)
    response = fn(field(1, manifest), timeout=10)
    assert response[0] == 0x0A, response
    length, at, shift = 0, 1, 0
    while True:
        length |= (response[at] & 0x7F) << shift
        at += 1
        shift += 7
        if not response[at - 1] & 0x80:
            return response[at:at + length]


CLASSES = [repeated_singular, identity_blowup, tiny_elements,
           distinct_region_ids,
           compression_bomb, calls_in_flight, concurrent_plans,
           unread_responses, rapid_reset, rapid_reset_connections,
           large_requests,
           idle_streams,
           descriptors, half_headers, cancelled, signals, lmdb_files,
           disk_full]


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--reshardd")
    parser.add_argument("--sanitized", action="store_true")
    parser.add_argument("--only")
    parser.add_argument("--worker")
    parser.add_argument("--address")
    parser.add_argument("--count", type=int)
    parser.add_argument("--method")
    parser.add_argument("--pygen", help="generated Python messages of the "
                        "e2e tests (build/tests/e2e/pygen)")
    parser.add_argument("--payload")
    args = parser.parse_args(argv)
    if args.worker == "plan_many":
        plan_many(args.address, args.count, args.pygen)
        return 0
    if args.worker == "plan_request":
        plan_request(args.address, args.payload, args.pygen)
        return 0
    if args.worker == "forget_many":
        forget_many(args.address, args.count)
        return 0
    if args.worker == "call":
        import grpc
        channel = grpc.insecure_channel(
            args.address, options=[("grpc.max_send_message_length", -1)])
        fn = channel.unary_unary(args.method, request_serializer=lambda b: b,
                                 response_deserializer=lambda b: b)
        with open(args.payload, "rb") as f:
            payload = f.read()
        try:
            fn(payload, timeout=30)
            print("OK ")
        except grpc.RpcError as error:
            print(error.code().name, error.details())
        return 0
    out = Outcome(args.sanitized)
    for fn in CLASSES:
        if args.only and args.only != fn.__name__:
            continue
        try:
            if fn in (concurrent_plans, unread_responses):
                fn(out, args.reshardd, args.pygen)
            else:
                fn(out, args.reshardd)
        except Exception as error:  # noqa: BLE001 - report and go on
            out.check(fn.__name__, False, "raised %r" % (error,))
    codes = []
    for daemon in DAEMONS:
        if daemon.proc.poll() is None:  # a failed class left it running
            daemon.stop()
        time.sleep(0.1)  # the stderr pump takes the last lines
        codes.append(daemon.exit_code)
    reports = [line for daemon in DAEMONS for line in daemon.lines
               if SANITIZER_REPORT.search(line)]
    out.check("every daemon exited 0 after SIGTERM, no sanitizer report",
              all(code == 0 for code in codes) and not reports,
              "exit codes %s; %s" % (codes, reports[:3]))
    print("%d passed, %d failed" % (out.passed, out.failed))
    sys.stdout.flush()
    # grpcio's threads can hold a normal interpreter exit.
    os._exit(1 if out.failed else 0)


if __name__ == "__main__":
    main()
