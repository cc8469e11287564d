"""Hostile request contents: fields and elements that make the
decoders, the identities or gzip multiply what the request holds."""
import time
import zlib

from hostile_harness import (DATA, DOMAIN, END_HEADERS, END_STREAM, HEADERS,
                             MiB, PLANNER, Daemon, RawConnection, attack,
                             expect, field, frame, grpc_headers,
                             grpc_message, packed)

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
