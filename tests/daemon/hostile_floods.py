"""HTTP/2 floods: rapid reset on one connection and on several (the reset
and read guards), and requests of the largest size, which must not be
taken for a flood."""
import re
import shutil
import socket
import struct
import subprocess
import tempfile
import threading
import time

from hostile_harness import (CALL_BOUND, END_HEADERS, FLOOD_BOUND, HEADERS,
                             HEALTH, PLANNER, RST_STREAM, Daemon, MiB,
                             RawConnection, attack, field, frame,
                             grpc_headers, measure)

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
