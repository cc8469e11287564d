"""Hostile load on the in-flight budget: many large calls at once, many
large plans at once, and clients that never read their responses. The
clients run in worker processes (test_hostile.py --worker) so the prober
measures the daemon."""
import os
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

from hostile_harness import (CALL_BOUND, DATA, DOMAIN, END_HEADERS,
                             END_STREAM, ENTRY, HEADERS, PLANNER, PREFACE,
                             SETTINGS, Daemon, MiB, attack, field, frame,
                             grpc_headers, grpc_message)

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
            [sys.executable, ENTRY, "--worker", "forget_many",
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
            [sys.executable, ENTRY, "--worker", "plan_many", "--address",
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
                [sys.executable, ENTRY, "--worker", "plan_request",
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
