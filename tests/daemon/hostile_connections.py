"""Streams, connections and the process: idle and half-sent streams,
more connections than descriptors, a cancelled call, signals, the LMDB
catalog's file modes and a full disk."""
import os
import signal
import socket
import stat
import struct
import subprocess
import tempfile
import time

from hostile_harness import (CALL_BOUND, DOMAIN, END_HEADERS, HEADERS,
                             HEALTH, PLANNER, RST_STREAM, Daemon,
                             RawConnection, attack, expect, field, frame,
                             grpc_headers, packed)

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


def cancelled_while_waiting(out, binary):
    """A call waiting for in-flight room whose client resets it gives its
    place up at once, CANCELLED: a unary call starts watching for its
    client's cancel only once it waits (daemon/server/call.c,
    watch_close), and a call waiting for room does. The first call holds
    the room, admitted and waiting for a request that never comes, until
    the default deadline."""
    daemon = Daemon(binary, "--log-level", "debug", "--max-request-bytes",
                    "4M", "--max-inflight-bytes", "20M",
                    "--default-deadline", "5s")
    conn = RawConnection(daemon.address)
    holder, waiter = conn.stream(), conn.stream()
    block = grpc_headers(PLANNER + "PlanLoad")
    conn.send(frame(HEADERS, END_HEADERS, holder, block))
    time.sleep(0.2)
    conn.send(frame(HEADERS, END_HEADERS, waiter, block))
    time.sleep(0.2)
    waiting = daemon.metric("reshard_inflight_waiting_calls")
    conn.send(frame(RST_STREAM, 0, waiter, struct.pack(">I", 8)))  # CANCEL
    stop = time.monotonic() + 2
    logged = []
    while not logged and time.monotonic() < stop:
        time.sleep(0.05)
        logged = [line for line in daemon.lines if "msg=rpc" in line and
                  "PlanLoad" in line]
    gave_up = daemon.metric("reshard_inflight_waiting_calls")
    out.check("a waiting call's cancel: its place given up, CANCELLED",
              waiting == 1 and gave_up == 0 and len(logged) == 1 and
              "code=CANCELLED" in logged[0] and
              "went away while waiting" in logged[0],
              "waiting %d before the reset, %d after; log %s" %
              (waiting, gave_up, logged))
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
