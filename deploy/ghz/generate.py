#!/usr/bin/python3
"""Writes the ghz request data (and configurations) for the SPEC §6 scenarios.

For every scenario variant (S1-8, then S1..S5) and step (publish, register,
planload, planload-runs: the same PlanLoad with strided runs, planstore)
and, for S1-8 and S5, the pooled reader of SPEC §6 (pooled_scenarios.py:
register-placement, register-memory, then planload-pooled and
planload-pooled-runs, which name the placement and the pool by id and carry
a block table) it writes into --out:

  {variant}.{step}.json   the request in protobuf's JSON mapping (ghz "data-file")
  {variant}.{step}.bin    the same request serialized (ghz "binary-file",
                          and scripts/load.py frames it for h2load)
  index.json              what each file claims to be: call and message type
                          (pooled steps: also the placement and memory ids)

Then the P/D transfer scenarios of SPEC §6 that SPEC §7 loads (T1-128: T1
with 128 tokens, and T5; transfer_scenarios.py): register-source-placement,
register-target-placement, register-source-memory (one RegisterMemory per
source pool: the .json is an array that ghz sends round-robin, one message
per call, total = the pool count; the .bin holds the messages
length-delimited, as ghz's count-prefixed binary data), register-target-
memory, then plantransfer and plantransfer-runs, which name both
placements and every pool by id and carry the two block tables.

and with --configs DIR the ghz configurations {variant}.{step}.ghz.json,
whose paths are relative to deploy/ghz/ (run ghz from there). The committed
configurations in deploy/ghz/ are exactly what `generate.py --configs
deploy/ghz` writes; CI checks that they have not drifted.

The messages come from tests/e2e/reshard_scenarios.py, which needs the
Python modules protoc generates at build time: --pygen names their
directory (default: the first build*/tests/e2e/pygen found).

Usage (from the repository root, after a build):
  deploy/ghz/generate.py                      # data into deploy/ghz/data
  cd deploy/ghz && ghz --config S1-8.publish.ghz.json \
      && ghz --config S1-8.register.ghz.json && ghz --config S1-8.planload.ghz.json
  # the pooled reader: register its placement and pool once, then load
  ghz --config S1-8.register-placement.ghz.json \
      && ghz --config S1-8.register-memory.ghz.json \
      && ghz --config S1-8.planload-pooled.ghz.json
  # a transfer: both placements and every pool once, then PlanTransfer
  for s in register-source-placement register-target-placement \
      register-source-memory register-target-memory plantransfer-runs; do
    ghz --config T1-128.$s.ghz.json || break; done
"""

import argparse
import glob
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
E2E = os.path.join(REPO, "tests", "e2e")

# How hard each step's ghz configuration pushes. Set-up steps run once.
LOAD_TOTALS = {"S1-8": 20000, "T1-128": 20000}
DEFAULT_LOAD_TOTAL = 2000
# The variants that also ship the pooled reader's requests (SPEC §7's
# throughput goal is S1-8 pooled; S5 is the large plan beside it).
POOLED_VARIANTS = ("S1-8", "S5")
CONCURRENCY = 64
CONNECTIONS = 4


def find_pygen(explicit):
    if explicit:
        return explicit
    if os.environ.get("RESHARD_E2E_PYGEN"):
        return os.environ["RESHARD_E2E_PYGEN"]
    found = sorted(glob.glob(os.path.join(REPO, "build*", "tests", "e2e",
                                          "pygen")))
    if not found:
        sys.exit("generate.py: no generated Python messages found; build "
                 "first (cmake --build build) or pass --pygen DIR")
    return found[0]


def setup_imports(pygen):
    os.environ["RESHARD_E2E_PYGEN"] = os.path.abspath(pygen)
    for path in (E2E, HERE):
        if path not in sys.path:
            sys.path.insert(0, path)


# What a PlanLoad step's configuration name says besides the method.
STEP_NOTES = {"planload-runs": " (runs)", "planload-pooled": " (pooled)",
              "planload-pooled-runs": " (pooled, runs)",
              "plantransfer-runs": " (runs)",
              "register-source-placement": " (source)",
              "register-target-placement": " (target)",
              "register-source-memory": " (source pools)",
              "register-target-memory": " (target pool)"}
# The steps loaded many times (the others are set-up, run once per message).
LOAD_STEPS = ("planload", "planstore", "plantransfer")


def ghz_config(variant, step, method, host, data_dir_rel, messages=1):
    call = "reshard.v1.Planner." + method
    config = {
        "name": "reshardd %s %s%s" % (variant, method,
                                      STEP_NOTES.get(step, "")),
        "proto": "../../proto/reshard/v1/planner.proto",
        "import-paths": ["../../proto"],
        "call": call,
        "host": host,
        "insecure": True,
        "timeout": "20s",
    }
    if step.startswith(LOAD_STEPS):
        config.update({
            "binary-file": "%s/%s.%s.bin" % (data_dir_rel, variant, step),
            "total": LOAD_TOTALS.get(variant, DEFAULT_LOAD_TOTAL),
            "concurrency": CONCURRENCY,
            "connections": CONNECTIONS,
        })
    else:
        config.update({
            "data-file": "%s/%s.%s.json" % (data_dir_rel, variant, step),
            "total": messages,
            "concurrency": 1,
        })
    return config


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
        f.write("\n")


def delimited(messages):
    """Messages behind their varint lengths (ghz's count-prefixed binary
    data)."""
    from google.protobuf.internal import encoder
    out = b""
    for m in messages:
        data = m.SerializeToString()
        out += encoder._VarintBytes(len(data)) + data
    return out


def generate(out, configs=None, host="127.0.0.1:50051", data_dir_rel="data"):
    """Writes every data file into ``out`` (and configurations into
    ``configs``); returns the index entries."""
    import pooled_scenarios
    import reshard_scenarios as scenarios
    import transfer_scenarios as transfers
    from google.protobuf import json_format

    os.makedirs(out, exist_ok=True)
    if configs:
        os.makedirs(configs, exist_ok=True)
    index = []
    sets = []
    for name, pages in scenarios.variants():
        req = scenarios.build(name, pages)
        steps = [(step, method, message, {})
                 for step, method, message in req.steps()]
        if req.name in POOLED_VARIANTS:
            pooled = pooled_scenarios.build(req)
            ids = {"placement_id": pooled.placement_id,
                   "memory_id": pooled.memory_id}
            steps += [(step, method, message, ids)
                      for step, method, message in pooled.steps()]
        common = {"manifest_key": req.manifest_key,
                  "model_domain": req.model_domain, "pages": req.pages}
        sets.append((req.name, common, steps))
    for name, tokens in transfers.variants():
        t = transfers.build(name, tokens)
        common = {"tokens": t.tokens,
                  "source_placement_id": t.source_placement_id,
                  "target_placement_id": t.target_placement_id,
                  "source_memory_ids": t.source_memory_ids,
                  "target_memory_id": t.target_memory_id}
        sets.append((t.name, common, [(step, method, message, {})
                                      for step, method, message
                                      in t.steps()]))
    for variant, common, steps in sets:
        for step, method, message, extra in steps:
            stem = "%s.%s" % (variant, step)
            many = isinstance(message, list)
            messages = message if many else [message]
            docs = [json_format.MessageToDict(
                m, preserving_proto_field_name=True) for m in messages]
            write_json(os.path.join(out, stem + ".json"),
                       docs if many else docs[0])
            with open(os.path.join(out, stem + ".bin"), "wb") as f:
                f.write(delimited(messages) if many
                        else message.SerializeToString())
            entry = {
                "variant": variant,
                "step": step,
                "call": "reshard.v1.Planner." + method,
                "path": "/reshard.v1.Planner/" + method,
                "message": messages[0].DESCRIPTOR.full_name,
                "json": stem + ".json",
                "binary": stem + ".bin",
            }
            if many:
                entry["messages"] = len(messages)
            entry.update(common)
            entry.update(extra)
            index.append(entry)
            if configs:
                write_json(os.path.join(configs, stem + ".ghz.json"),
                           ghz_config(variant, step, method, host,
                                      data_dir_rel, len(messages)))
    write_json(os.path.join(out, "index.json"), index)
    return index


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=os.path.join(HERE, "data"),
                        help="directory for the request data "
                             "(default deploy/ghz/data)")
    parser.add_argument("--configs", default=None,
                        help="also write the ghz configurations here")
    parser.add_argument("--host", default="127.0.0.1:50051",
                        help="daemon address the configurations target")
    parser.add_argument("--pygen", default=None,
                        help="directory of the generated *_pb2.py modules")
    args = parser.parse_args()
    setup_imports(find_pygen(args.pygen))
    index = generate(args.out, args.configs, args.host)
    print("wrote %d requests to %s" % (len(index), args.out))


if __name__ == "__main__":
    main()
