#!/usr/bin/python3
"""Writes the committed seed corpus of tests/fuzz (run from the repository
root after a build; RESHARD_E2E_PYGEN names the generated messages, as for
the end-to-end tests). Seeds are small valid inputs that take each target
deep; the fuzzer finds the invalid ones. Regression inputs (crash-*) are
never written here."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))
import reshard_e2e as e  # noqa: E402
import reshard_pools as pools  # noqa: E402
import reshard_scenarios as scenarios  # noqa: E402
from reshard_e2e import pb  # noqa: E402

CORPUS = os.path.join(HERE, "corpus")
# The order of fuzz_rpc.c's rpcs[] table.
RPC = {"PublishManifest": 0, "GetManifest": 1, "RegisterPages": 2,
       "ForgetPages": 3, "RegisterPlacement": 4, "PlanUpload": 5,
       "PlanLoad": 6, "PlanStore": 7, "Health.Check": 8,
       "RegisterMemory": 9, "ForgetMemory": 10, "PlanTransfer": 11}
# fuzz_reshardctl_json.c's types[].
JSON_TYPES = {"manifest.json": 0, "placement.json": 1,
              "plan-upload.json": 2, "plan.json": 3, "pool.json": 6,
              "pooled.json": 8, "pooled-inline.json": 8}


def rpc(method, msg):
    return bytes([RPC[method]]) + msg.SerializeToString()


def memory_seeds():
    """Pools as engines lay them out (tests/e2e/reshard_pools.py) against a
    TP2·PP2 reader: RegisterMemory with the placement inline and by id, and
    pooled PlanLoad / PlanStore with the pool inline and a scattered block
    table, or by memory id."""
    for name, desc, build, block, blocks in (
            ("vllm", pools.DESC, pools.vllm_pool, 4, 9),
            ("flashinfer", pools.DESC, pools.flashinfer_pool, 16, 4),
            ("page-first", pools.DESC, pools.page_first_pool, 8, 5),
            ("mla", pools.MLA_DESC, pools.vllm_pool, 4, 9)):
        reader = e.make_placement(desc, 1, 2, 2, "seed-r")
        part = reader.parts[1]
        pool = build(desc, part, block, blocks)
        write("rpc", "memory-" + name, rpc("RegisterMemory",
              pb.RegisterMemoryRequest(pool=pool, placement=reader)))
        table = pools.scattered(blocks, seed=1)
        keys = ["seed-%d" % i for i in range(pools.PAGES)]
        load = pb.PlanLoadRequest(
            model_domain="0" * 64, page_keys=keys, placement=reader,
            pooled=pools.pooled(inline_pool=pool, block_ids=table))
        write("rpc", "pooled-load-" + name, rpc("PlanLoad", load))
        store = pb.PlanStoreRequest(
            manifest_key="kv/a/manifests/b", placement=reader,
            page_count=pools.PAGES,
            pooled=pools.pooled(inline_pool=pool, block_ids=table))
        write("rpc", "pooled-store-" + name, rpc("PlanStore", store))
    pid = e.canonical_placement_id(reader)
    mid = pools.memory_id(pool, pid)
    write("rpc", "memory-by-id", rpc("RegisterMemory",
          pb.RegisterMemoryRequest(pool=pool, placement_id=pid)))
    write("rpc", "forget-memory", rpc("ForgetMemory",
          pb.ForgetMemoryRequest(memory_id=mid)))
    write("rpc", "pooled-load-id", rpc("PlanLoad", pb.PlanLoadRequest(
        model_domain="0" * 64, page_keys=["seed-0"], placement_id=pid,
        pooled=pools.pooled(mid, [3, 1]))))
    write("rpc", "pooled-transfer-id", rpc("PlanTransfer",
          pb.PlanTransferRequest(
              source_placement_id=pid, source_memory_ids=[mid, mid],
              source_block_ids=[2, 0, 1], token_count=8,
              target_placement_id=pid, pooled=pools.pooled(mid, [3, 1]),
              runs=True, operation_id="seed")))


def write(target, name, data):
    os.makedirs(os.path.join(CORPUS, target), exist_ok=True)
    with open(os.path.join(CORPUS, target, "seed-" + name), "wb") as f:
        f.write(data)


def main():
    for name in ("S1", "S2", "S3", "S4", "S5"):
        r = scenarios.build(name, pages=2)
        write("rpc", name + "-publish", rpc("PublishManifest", r.publish))
        write("rpc", name + "-register", rpc("RegisterPages", r.register))
        write("rpc", name + "-planload", rpc("PlanLoad", r.plan_load))
        write("rpc", name + "-placement", rpc("RegisterPlacement",
              pb.RegisterPlacementRequest(placement=r.writer)))
        write("rpc", name + "-upload", rpc("PlanUpload", pb.PlanUploadRequest(
            placement=r.writer, format=pb.LPHD)))
        store = pb.PlanStoreRequest(manifest_key=r.manifest_key,
                                    placement=r.reader,
                                    binding=r.binding.message, page_count=2)
        write("rpc", name + "-store", rpc("PlanStore", store))
        record = r.manifest.SerializeToString()
        write("catalog_record", name + "-record", b"\x00" + record)
        write("catalog_record", name + "-resp",
              b"\x01*2\r\n$%d\r\n%s\r\n$-1\r\n" % (len(record), record))
        write("catalog_record", name + "-lmdb",
              b"\x02" + b"\x00\x00\x00\x01\x00\x00\x00\x01" + record)
    write("rpc", "get", bytes([RPC["GetManifest"]]) +
          pb.GetManifestRequest(manifest_key="kv/a/manifests/b")
          .SerializeToString())
    write("rpc", "health", bytes([RPC["Health.Check"]]) + b"\x0a\x12"
          b"reshard.v1.Planner")
    write("rpc", "forget", bytes([RPC["ForgetPages"]]) +
          pb.ForgetPagesRequest(model_domain="d", page_keys=["p"])
          .SerializeToString())
    memory_seeds()
    for i in range(8):
        write("plan_oracle", "case-%d" % i,
              i.to_bytes(8, "little") + (i * 0x9E3779B9 & 0xFFFFFFFF)
              .to_bytes(4, "little"))
    write("config", "flags", b"--listen\x00127.0.0.1:0\x00--catalog\x00"
          b"redis://user:pw@db:6379/1\x00--cache-bytes=64M\x00"
          b"--drain-timeout\x00500ms\x00--tls-cert\x00c.pem\x00--tls-key"
          b"\x00k.pem\x00\x00RESHARDD_MAX_OPERATIONS=10\x00")
    write("config", "env", b"--check-config\x00\x00RESHARDD_LISTEN="
          b"[::1]:0\x00RESHARDD_ALLOW_INSECURE_REMOTE=true\x00"
          b"RESHARDD_METRICS_LISTEN=0.0.0.0:9464\x00")
    examples = os.path.join(HERE, "..", "..", "clients", "examples")
    for name, index in JSON_TYPES.items():
        with open(os.path.join(examples, name), "rb") as f:
            write("reshardctl_json", name, bytes([index]) + f.read())


if __name__ == "__main__":
    main()
