#!/usr/bin/env python3
"""End-to-end smoke test of reshardd with stock grpcio.

Starts the daemon on 127.0.0.1:0, reads the bound port from its log, and
walks one small TP2 -> TP1 case through every RPC: PlanUpload, publish,
register pages and placement, PlanLoad, then executes the returned copies
against synthetic Part bytes and checks every byte. Also: health, a
malformed request, an unknown manifest, an unknown method and a clean exit
on SIGTERM.

Usage: test_smoke.py --reshardd PATH --python-dir DIR
"""
import argparse
import re
import signal
import subprocess
import sys
import threading

LISTENING = re.compile(r"msg=listening address=(\S+)")


class Daemon:
    """reshardd in a child process; its stderr is collected in the
    background so the pipe never fills."""

    def __init__(self, binary):
        self.proc = subprocess.Popen(
            [binary, "--listen", "127.0.0.1:0", "--catalog", "memory",
             "--log-level", "debug",
             "--max-request-bytes", "1M"],
            stderr=subprocess.PIPE, text=True)
        self.lines = []
        self.address = None
        ready = threading.Event()

        def pump():
            for line in self.proc.stderr:
                self.lines.append(line.rstrip("\n"))
                match = LISTENING.search(line)
                if match and self.address is None:
                    self.address = match.group(1)
                    ready.set()
            ready.set()

        self.thread = threading.Thread(target=pump, daemon=True)
        self.thread.start()
        if not ready.wait(10) or self.address is None:
            self.proc.kill()
            raise RuntimeError("reshardd did not log its address:\n" +
                               "\n".join(self.lines))


def unary(channel, path, response_type):
    return channel.unary_unary(
        path, request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=response_type.FromString)


def expect_code(code, fn, *args):
    import grpc
    try:
        fn(*args, timeout=10)
    except grpc.RpcError as error:
        assert error.code() == code, (error.code(), error.details())
        return error.details()
    raise AssertionError("expected %s" % code)


# The §1.3 strides: (layer, token, head) for a Part with L layers, H heads.
def strides(fmt, pb, L, H, P, hb):
    if fmt == pb.PLHD:
        return H * hb, L * H * hb, hb
    if fmt == pb.LPHD:
        return P * H * hb, H * hb, hb
    return hb, L * hb, P * L * hb  # HPLD


def value(page, layer, comp, token, head, element):
    """A logical value, two bytes (bf16 sized), unique enough to catch any
    misplaced copy."""
    v = (page * 4099 + layer * 257 + comp * 131 + token * 17 + head * 7 +
         element) & 0xFFFF
    return v.to_bytes(2, "little")


def build_parts(pb, layout, page):
    """The bytes of every Part of one stored page, per SPEC §1.3."""
    d = layout.descriptor
    P, item = d.page_size, d.itemsize
    hbs = [d.key_head_dim * item, d.value_head_dim * item]
    parts = []
    for shard in layout.shards:
        L, H = len(shard.layer_ids), shard.head_count
        kblock = L * P * H * hbs[0]
        data = bytearray(L * P * H * (hbs[0] + hbs[1]))
        for local, layer in enumerate(sorted(shard.layer_ids)):
            for comp, hb in enumerate(hbs):
                ls, ts, hs = strides(layout.format, pb, L, H, P, hb)
                base = local * ls + (kblock if comp else 0)
                for t in range(P):
                    for h in range(shard.head_start, shard.head_start + H):
                        for e in range(hb // item):
                            at = base + t * ts + (h - shard.head_start) * hs + e * item
                            data[at:at + item] = value(page, layer, comp, t, h, e)
        parts.append(bytes(data))
    return parts


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--reshardd", required=True)
    parser.add_argument("--python-dir", required=True)
    args = parser.parse_args()
    sys.path.insert(0, args.python_dir)
    import grpc
    from grpc_health.v1 import health_pb2
    from reshard.v1 import planner_pb2 as pb

    daemon = Daemon(args.reshardd)
    try:
        run(daemon, grpc, pb, health_pb2)
        # A health watcher sees SERVING, then NOT_SERVING once SIGTERM
        # starts the drain; the daemon then exits cleanly.
        channel = grpc.insecure_channel(daemon.address)
        watch = channel.unary_stream(
            "/grpc.health.v1.Health/Watch",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=health_pb2.HealthCheckResponse.FromString)
        updates = watch(health_pb2.HealthCheckRequest(service=""), timeout=10)
        assert next(updates).status == health_pb2.HealthCheckResponse.SERVING
        daemon.proc.send_signal(signal.SIGTERM)
        assert next(updates).status == health_pb2.HealthCheckResponse.NOT_SERVING
        try:
            next(updates)
            raise AssertionError("the watch stream outlived the daemon")
        except grpc.RpcError as error:
            assert error.code() in (grpc.StatusCode.UNAVAILABLE,
                                    grpc.StatusCode.CANCELLED), error.code()
        channel.close()
        print("ok: health Watch SERVING -> NOT_SERVING on SIGTERM")
        code = daemon.proc.wait(10)
        daemon.thread.join(5)
    except BaseException:
        daemon.proc.kill()
        daemon.proc.wait()
        print("\n".join(daemon.lines[-40:]), file=sys.stderr)
        raise
    reports = [line for line in daemon.lines
               if "Sanitizer" in line or "runtime error:" in line]
    assert not reports, "sanitizer reports:\n" + "\n".join(daemon.lines)
    assert code == 0, "exit status %d after SIGTERM" % code
    assert any("msg=draining" in line for line in daemon.lines)
    assert any("msg=stopped" in line for line in daemon.lines)
    print("ok: SIGTERM -> exit 0")


def run(daemon, grpc, pb, health_pb2):
    channel = grpc.insecure_channel(daemon.address)
    planner = "/reshard.v1.Planner/"
    publish = unary(channel, planner + "PublishManifest", pb.PublishManifestResponse)
    get_manifest = unary(channel, planner + "GetManifest", pb.GetManifestResponse)
    register_pages = unary(channel, planner + "RegisterPages", pb.RegisterPagesResponse)
    register_placement = unary(channel, planner + "RegisterPlacement",
                               pb.RegisterPlacementResponse)
    plan_upload = unary(channel, planner + "PlanUpload", pb.PlanUploadResponse)
    plan_load = unary(channel, planner + "PlanLoad", pb.PlanLoadResponse)
    check = unary(channel, "/grpc.health.v1.Health/Check",
                  health_pb2.HealthCheckResponse)

    # Health first: the probe Kubernetes would run.
    reply = check(health_pb2.HealthCheckRequest(service=""), timeout=10)
    assert reply.status == health_pb2.HealthCheckResponse.SERVING
    reply = check(health_pb2.HealthCheckRequest(service="reshard.v1.Planner"), timeout=10)
    assert reply.status == health_pb2.HealthCheckResponse.SERVING
    expect_code(grpc.StatusCode.NOT_FOUND, check,
                health_pb2.HealthCheckRequest(service="nope"))
    print("ok: health")

    descriptor = pb.Descriptor(global_layer_ids=[0, 1], dtype="bf16", itemsize=2,
                               page_size=16, total_kv_heads=2, key_head_dim=8,
                               value_head_dim=8)

    def part(pid, tp, head):
        return pb.PlacementPart(participant_id=pid, rank=pb.Rank(dp=0, pp=0, tp=tp),
                                layer_ids=[0, 1], head_start=head, head_count=1)

    writer = pb.Placement(resource_id="res", revision="rev", placement_set_id="w",
                          dp_size=1, pp_size=1, tp_size=2, descriptor=descriptor,
                          parts=[part("w-0", 0, 0), part("w-1", 1, 1)])
    upload = plan_upload(pb.PlanUploadRequest(placement=writer, format=pb.LPHD),
                         timeout=10)
    assert len(upload.layout.shards) == 2 and list(upload.part_writers) == ["w-0", "w-1"]
    assert upload.layout_id.startswith("sha256:")
    print("ok: PlanUpload", upload.layout_id)

    manifest = pb.StoreManifest(namespace="ns", model_id="model", model_revision="rev",
                                semantic_fingerprint="fp", layout=upload.layout)
    published = publish(pb.PublishManifestRequest(manifest=manifest), timeout=10)
    assert published.created and published.layout_id == upload.layout_id
    assert published.manifest_key == "kv/%s/manifests/%s" % (
        published.model_domain, upload.layout_id[len("sha256:"):])
    again = publish(pb.PublishManifestRequest(manifest=manifest), timeout=10)
    assert not again.created and again.manifest_key == published.manifest_key
    fetched = get_manifest(pb.GetManifestRequest(manifest_key=published.manifest_key),
                           timeout=10)
    assert fetched.manifest.layout == upload.layout
    print("ok: PublishManifest / GetManifest", published.manifest_key)

    added = register_pages(pb.RegisterPagesRequest(
        manifest_key=published.manifest_key, page_keys=["p0", "p1"]), timeout=10)
    assert added.added == 2, added
    added = register_pages(pb.RegisterPagesRequest(
        manifest_key=published.manifest_key, page_keys=["p0", "p1"]), timeout=10)
    assert added.added == 0, added
    print("ok: RegisterPages")

    reader = pb.Placement(resource_id="res", revision="rev", placement_set_id="r",
                          dp_size=1, pp_size=1, tp_size=1, descriptor=descriptor,
                          parts=[pb.PlacementPart(participant_id="r-0", rank=pb.Rank(),
                                                  layer_ids=[0, 1], head_start=0,
                                                  head_count=2)])
    placement_id = register_placement(
        pb.RegisterPlacementRequest(placement=reader), timeout=10).placement_id
    assert placement_id.startswith("sha256:")
    print("ok: RegisterPlacement", placement_id)

    # The reader's memory: [layer][component][token][head][dim], 3 pages
    # requested (p2 is not stored, so the plan covers 2).
    pages, P, hb, heads = 3, 16, 16, 2
    block = pages * P * heads * hb
    region_bytes = 2 * 2 * block
    ranges = []
    for layer in (0, 1):
        for comp in (0, 1):
            ranges.append(pb.BindingRange(
                global_layer_id=layer, component=pb.KEY if comp == 0 else pb.VALUE,
                token_start=0, token_count=pages * P, head_start=0, head_count=heads,
                region_id="kv", offset_bytes=(layer * 2 + comp) * block,
                token_stride_bytes=heads * hb, head_stride_bytes=hb))
    binding = pb.RuntimeBinding(participant_id="r-0", endpoint="local",
                                regions=[pb.Region(region_id="kv", address=1 << 20,
                                                   nbytes=region_bytes)],
                                ranges=ranges)
    request = pb.PlanLoadRequest(model_domain=published.model_domain,
                                 page_keys=["p0", "p1", "p2"], placement_id=placement_id,
                                 binding=binding, operation_id="smoke")
    plan = plan_load(request, timeout=10)
    assert plan.hit_pages == 2, plan.hit_pages
    assert [p.page_key for p in plan.pages] == ["p0", "p1"]
    assert all(p.manifest_key == published.manifest_key for p in plan.pages)
    assert list(plan.region_ids) == ["kv"]
    assert plan.placement_id == placement_id

    stored = {p: build_parts(pb, upload.layout, index)
              for index, p in enumerate(["p0", "p1"])}
    memory = bytearray(b"\xee" * region_bytes)
    copies = moved = 0
    for batch in plan.batches:
        n = len(batch.nbytes)
        assert n == len(batch.page_index) == len(batch.part_offset) == len(batch.region_offset)
        assert sum(batch.nbytes) == batch.bytes
        for i in range(n):
            src = stored[plan.pages[batch.page_index[i]].page_key][batch.part_index[i]]
            off, size, dst = batch.part_offset[i], batch.nbytes[i], batch.region_offset[i]
            assert off + size <= len(src) and dst + size <= region_bytes
            memory[dst:dst + size] = src[off:off + size]
            copies += 1
            moved += size
    assert copies == plan.stats.operations and moved == plan.stats.bytes

    for layer in (0, 1):
        for comp in (0, 1):
            for page in range(pages):
                for t in range(P):
                    for h in range(heads):
                        for e in range(hb // 2):
                            at = ((layer * 2 + comp) * block + (page * P + t) * heads * hb +
                                  h * hb + e * 2)
                            got = bytes(memory[at:at + 2])
                            want = value(page, layer, comp, t, h, e) if page < 2 else b"\xee\xee"
                            assert got == want, (layer, comp, page, t, h, e, got, want)
    print("ok: PlanLoad TP2->TP1: %d copies, %d bytes, every byte checked" % (copies, moved))

    # The same plan with the placement inline.
    request.placement.CopyFrom(reader)
    inline = plan_load(request, timeout=10)
    assert inline.placement_id == placement_id and inline.batches == plan.batches
    print("ok: PlanLoad with an inline placement")

    # Errors.
    raw = channel.unary_unary(planner + "PlanLoad")
    details = expect_code(grpc.StatusCode.INVALID_ARGUMENT, raw, b"\xff\xff\xff\xff")
    print("ok: malformed request -> INVALID_ARGUMENT:", details)
    bad = pb.PlanLoadRequest()
    bad.CopyFrom(request)
    bad.binding.ranges[3].component = pb.COMPONENT_UNSPECIFIED
    details = expect_code(grpc.StatusCode.INVALID_ARGUMENT, plan_load, bad)
    assert "binding.ranges[3].component" in details, details
    print("ok: unspecified enum -> INVALID_ARGUMENT:", details)
    unknown = "kv/%s/manifests/%s" % ("0" * 64, "0" * 64)
    details = expect_code(grpc.StatusCode.NOT_FOUND, get_manifest,
                          pb.GetManifestRequest(manifest_key=unknown))
    print("ok: unknown manifest -> NOT_FOUND:", details)
    bad.CopyFrom(request)
    bad.model_domain = "1" * 64
    details = expect_code(grpc.StatusCode.NOT_FOUND, plan_load, bad)
    assert "no manifest published" in details, details
    print("ok: unknown model domain -> NOT_FOUND:", details)
    expect_code(grpc.StatusCode.UNIMPLEMENTED, unary(channel, planner + "Nope",
                                                     pb.PlanLoadResponse), pb.PlanLoadRequest())
    print("ok: unknown method -> UNIMPLEMENTED")
    huge = pb.RegisterPagesRequest(manifest_key=published.manifest_key,
                                   page_keys=["k%07d" % i for i in range(200000)])
    details = expect_code(grpc.StatusCode.RESOURCE_EXHAUSTED, register_pages, huge)
    print("ok: request over --max-request-bytes -> RESOURCE_EXHAUSTED:", details)
    channel.close()


if __name__ == "__main__":
    main()
