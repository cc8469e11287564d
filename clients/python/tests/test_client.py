"""Every RPC through reshard.Client and reshard.aio.Client against a live
daemon: keyword arguments, results, errors as ReshardError, retries of
idempotent calls only."""

import asyncio
import time

import grpc
import pytest

import reshard
import reshard.aio
import kv
from conftest import Daemon, free_port


MISSING_KEY = "kv/%s/manifests/%s" % ("0" * 64, "1" * 64)


def writer_layout(client, tag):
    desc = kv.descriptor(kv.CONFIGS[0])
    writer = reshard.placement(desc, tp=4, prefix="w-" + tag)
    up = client.plan_upload(writer, format="lphd")
    return desc, writer, up


def test_every_rpc(client):
    desc, writer, up = writer_layout(client, "rpc")
    assert up.layout.format == reshard.LPHD
    assert list(up.part_writers) == [p.participant_id for p in writer.parts]
    fields = dict(namespace="pytest", model_id="rpc", model_revision="1",
                  semantic_fingerprint="fp")
    pub = client.publish_manifest(layout=up.layout, **fields)
    assert pub.created and pub.layout_id.startswith("sha256:")
    again = client.publish_manifest(reshard.manifest(up.layout, **fields))
    assert not again.created and again.manifest_key == pub.manifest_key
    got = client.get_manifest(pub.manifest_key)
    assert got.layout_id == pub.layout_id and got.model_domain == \
        pub.model_domain and got.manifest.model_id == "rpc"
    assert client.register_pages(pub.manifest_key, ["a", "b"]) == 2
    assert client.register_pages(pub.manifest_key, ["b", "c"]) == 1
    assert client.forget_pages(pub.model_domain, ["c"]) == 1
    assert client.forget_pages(pub.model_domain, ["c"],
                               manifest_key=pub.manifest_key) == 0
    reader = reshard.placement(desc, tp=2, pp=2, prefix="r-rpc")
    pid = client.register_placement(reader)
    assert pid.startswith("sha256:")
    part = reader.parts[3]
    binding, _ = kv.reader_memory(desc, part, "paged", 8, seed=0)
    binding_2p = reshard.BindingBuilder(desc, part, num_tokens=2 * kv.PAGE)
    for layer in part.layer_ids:
        binding_2p.add_paged(kv.torch.zeros((2, 4, 8, 2, 16),
                                            dtype=kv.torch.bfloat16),
                             layer=layer, block_table=[3, 0, 2, 1])
    by_id = client.plan_load(model_domain=pub.model_domain,
                             page_keys=["a", "b"],
                             binding=binding_2p.build(), placement_id=pid,
                             limits=reshard.limits(max_batch_operations=5))
    assert by_id.placement_id == pid and by_id.hit_pages == 2
    assert all(len(b) <= 5 for b in by_id.batches) and len(by_id.batches) > 1
    # The hit prefix stops at the forgotten page "c".
    prefix = client.plan_load(model_domain=pub.model_domain,
                              page_keys=["a", "b", "c"], binding=binding,
                              placement=reader, target_dp_rank=0,
                              preferred_layout_ids=[pub.layout_id])
    assert prefix.hit_pages == 2
    assert client.health() == "SERVING"
    assert client.health("reshard.v1.Planner") == "SERVING"


def test_errors_carry_code_and_message(client):
    with pytest.raises(reshard.ReshardError) as err:
        client.get_manifest(MISSING_KEY)
    assert err.value.code == grpc.StatusCode.NOT_FOUND
    assert err.value.code_name == "NOT_FOUND" and err.value.method == \
        "GetManifest"
    assert err.value.message and err.value.message in str(err.value)
    desc, writer, up = writer_layout(client, "err")
    pub = client.publish_manifest(layout=up.layout, namespace="pytest",
                                  model_id="err", model_revision="1",
                                  semantic_fingerprint="fp")
    client.register_pages(pub.manifest_key, ["x"])
    reader = reshard.placement(desc, tp=2, pp=2, prefix="r-err")
    binding, _ = kv.reader_memory(desc, reader.parts[0], "paged", 8, 0)
    # A binding the daemon rejects: a stride made too small by hand.
    msg = reshard.RuntimeBinding()
    msg.CopyFrom(binding.message)
    msg.ranges[0].token_stride_bytes = 2
    with pytest.raises(reshard.ReshardError) as err:
        client.plan_load(model_domain=pub.model_domain,
                         page_keys=["x", "y", "z"], binding=msg,
                         placement=reader)
    assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "binding.ranges[0]" in err.value.message
    # Client-side checks fail before anything is sent.
    with pytest.raises(reshard.BindingError, match="covers 48 tokens"):
        client.plan_load(model_domain=pub.model_domain, page_keys=["x"],
                         binding=binding, placement=reader)
    with pytest.raises(ValueError, match="exactly one"):
        client.plan_load(model_domain=pub.model_domain, page_keys=["x"],
                         binding=msg)


def test_deadline_bounds_the_retries():
    with reshard.Client("127.0.0.1:%d" % free_port(), timeout=0.5,
                        retries=100) as c:
        start = time.monotonic()
        with pytest.raises(reshard.ReshardError) as err:
            c.get_manifest(MISSING_KEY)
        took = time.monotonic() - start
    assert err.value.code in (grpc.StatusCode.DEADLINE_EXCEEDED,
                              grpc.StatusCode.UNAVAILABLE)
    assert 0.4 < took < 2.0, took


def test_retries_idempotent_calls_only():
    port = free_port()
    target = "127.0.0.1:%d" % port
    with reshard.Client(target, timeout=1.0, retries=0) as c:
        with pytest.raises(reshard.ReshardError) as err:
            c.get_manifest(MISSING_KEY)
        assert err.value.code == grpc.StatusCode.UNAVAILABLE
    # A daemon that comes up while the client retries: the idempotent call
    # gets through, the non-idempotent one fails at once.
    with reshard.Client(target, timeout=20.0, retries=50) as c:
        start = time.monotonic()
        with pytest.raises(reshard.ReshardError) as err:
            c.register_pages(MISSING_KEY, ["p"])
        assert err.value.code == grpc.StatusCode.UNAVAILABLE
        assert time.monotonic() - start < 5
        late = {}

        def start_later():
            time.sleep(0.5)
            late["daemon"] = Daemon(port)

        import threading
        t = threading.Thread(target=start_later)
        t.start()
        try:
            with pytest.raises(reshard.ReshardError) as err:
                c.get_manifest(MISSING_KEY)
            assert err.value.code == grpc.StatusCode.NOT_FOUND
        finally:
            t.join()
            if "daemon" in late:
                assert late["daemon"].stop() == 0


def test_aio_client(daemon):
    async def main():
        async with reshard.aio.Client(daemon.target, timeout=30) as c:
            assert await c.health() == "SERVING"
            desc = kv.descriptor(kv.CONFIGS[2])
            writer = reshard.placement(desc, tp=4, prefix="w-aio")
            up = await c.plan_upload(writer, format="HPLD")
            pub = await c.publish_manifest(
                layout=up.layout, namespace="pytest", model_id="aio",
                model_revision="1", semantic_fingerprint="fp")
            keys = ["aio-%d" % i for i in range(kv.PAGES)]
            assert await c.register_pages(pub.manifest_key, keys) == 3
            reader = reshard.placement(desc, tp=2, pp=2, prefix="r-aio")
            binding, _ = kv.reader_memory(desc, reader.parts[1], "paged",
                                          32, 0)
            plans = await asyncio.gather(*[
                c.plan_load(model_domain=pub.model_domain, page_keys=keys,
                            binding=binding, placement=reader)
                for _ in range(4)])
            assert len({p.response.SerializeToString() for p in plans}) == 1
            assert plans[0].hit_pages == 3
            with pytest.raises(reshard.ReshardError) as err:
                await c.get_manifest(MISSING_KEY)
            assert err.value.code == grpc.StatusCode.NOT_FOUND
            assert await c.forget_pages(pub.model_domain, keys) == 3
            assert (await c.register_placement(reader)).startswith("sha256")
            assert (await c.get_manifest(pub.manifest_key)).layout_id == \
                pub.layout_id
    asyncio.run(main())
