"""Plans printed like ``reshardctl plan --format json|table``
(docs/clients.md), and read back from the JSON document (reshard_e2e.py
re-exports all of it)."""

from reshard_env import pb
from reshard_oracle import batch_entries, has_runs


# -------------------------------------------------------- plan printing --

def json_string(s):
    """A JSON string escaped like jansson (and so like reshardctl)."""
    out = ['"']
    short = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f",
             "\n": "\\n", "\r": "\\r", "\t": "\\t"}
    for ch in s:
        if ch in short:
            out.append(short[ch])
        elif ord(ch) < 0x20:
            out.append("\\u%04X" % ord(ch))
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def plan_document(resp):
    """The plan document of docs/clients.md as Python objects."""
    runs = has_runs(resp)
    batches = []
    for rb in resp.batches:
        entries = []
        for i in range(len(rb.nbytes)):
            entry = {
                "nbytes": rb.nbytes[i], "page_index": rb.page_index[i],
                "page_key": resp.pages[rb.page_index[i]].page_key,
                "part": rb.part_index[i], "part_offset": rb.part_offset[i],
                "region_id": resp.region_ids[rb.region_index[i]],
                "region_index": rb.region_index[i],
                "region_offset": rb.region_offset[i]}
            if runs:
                entry.update(count=rb.run_count[i],
                             part_stride=rb.part_stride[i],
                             region_stride=rb.region_stride[i])
            entries.append(entry)
        batches.append({"bytes": rb.bytes,
                        "runs" if runs else "copies": entries})
    stats = {"bytes": resp.stats.bytes,
             "copies_before_coalescing": resp.stats.copies_before_coalescing,
             "operations": resp.stats.operations}
    if runs:
        stats["runs"] = resp.stats.runs
    return {"batches": batches, "hit_pages": resp.hit_pages,
            "pages": [{"layout_id": p.layout_id,
                       "manifest_key": p.manifest_key,
                       "page_key": p.page_key} for p in resp.pages],
            "placement_id": resp.placement_id,
            "region_ids": list(resp.region_ids),
            "stats": stats}


def _dump(value, out):
    if isinstance(value, dict):
        out.append("{")
        for i, key in enumerate(sorted(value)):
            if i:
                out.append(",")
            out.append(json_string(key))
            out.append(":")
            _dump(value[key], out)
        out.append("}")
    elif isinstance(value, list):
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            _dump(item, out)
        out.append("]")
    elif isinstance(value, str):
        out.append(json_string(value))
    elif isinstance(value, bool):
        out.append("true" if value else "false")
    elif isinstance(value, int):
        out.append(str(value))
    else:
        raise TypeError(type(value))


def plan_json_text(resp):
    """``reshardctl plan --format json`` output for ``resp``, as str."""
    out = []
    _dump(plan_document(resp), out)
    return "".join(out) + "\n"


def plan_table_text(resp):
    """``reshardctl plan --format table`` output for ``resp``, as str."""
    runs = has_runs(resp)
    if runs:
        headers = ["BATCH", "PAGE_KEY", "PART", "PART_OFFSET", "PART_STRIDE",
                   "REGION_ID", "REGION_OFFSET", "REGION_STRIDE", "NBYTES",
                   "COUNT"]
        left = [False, True, False, False, False, True, False, False, False,
                False]
    else:
        headers = ["BATCH", "PAGE_KEY", "PART", "PART_OFFSET", "REGION_ID",
                   "REGION_OFFSET", "NBYTES"]
        left = [False, True, False, False, True, False, False]
    rows = []
    for b, rb in enumerate(resp.batches):
        for (pi, part, po, ri, ro, n, count, ps, rs) in batch_entries(rb, b):
            if runs:
                rows.append([str(b), resp.pages[pi].page_key, str(part),
                             str(po), str(ps), resp.region_ids[ri], str(ro),
                             str(rs), str(n), str(count)])
            else:
                rows.append([str(b), resp.pages[pi].page_key, str(part),
                             str(po), resp.region_ids[ri], str(ro), str(n)])
    width = [len(h.encode()) for h in headers]
    for row in rows:
        for c, cell in enumerate(row):
            width[c] = max(width[c], len(cell.encode()))

    def line(cells):
        out = []
        for c, cell in enumerate(cells):
            pad = " " * (width[c] - len(cell.encode()))
            out.append(cell + pad if left[c] else pad + cell)
        return "  ".join(out) + "\n"

    text = ["# hit_pages=%d placement_id=%s\n" % (resp.hit_pages,
                                                   resp.placement_id)]
    for i, p in enumerate(resp.pages):
        text.append("# page %d page_key=%s manifest_key=%s layout_id=%s\n"
                    % (i, p.page_key, p.manifest_key, p.layout_id))
    text.append(line(headers))
    text.extend(line(r) for r in rows)
    st = resp.stats
    text.append("# batches=%d operations=%d bytes=%d "
                "copies_before_coalescing=%d%s\n"
                % (len(resp.batches), st.operations, st.bytes,
                   st.copies_before_coalescing,
                   " runs=%d" % st.runs if runs else ""))
    return "".join(text)


def plan_from_document(doc):
    """Rebuilds a PlanLoadResponse from the JSON document (so a plan printed
    by reshardctl can be executed with ``execute_plan``)."""
    resp = pb.PlanLoadResponse(hit_pages=doc["hit_pages"],
                               placement_id=doc["placement_id"],
                               region_ids=doc["region_ids"])
    for p in doc["pages"]:
        resp.pages.add(page_key=p["page_key"],
                       manifest_key=p["manifest_key"],
                       layout_id=p["layout_id"])
    for b in doc["batches"]:
        rb = resp.batches.add(bytes=b["bytes"])
        for c in b.get("copies", b.get("runs", [])):
            rb.page_index.append(c["page_index"])
            rb.part_index.append(c["part"])
            rb.part_offset.append(c["part_offset"])
            rb.region_index.append(c["region_index"])
            rb.region_offset.append(c["region_offset"])
            rb.nbytes.append(c["nbytes"])
            if "count" in c:
                rb.run_count.append(c["count"])
                rb.part_stride.append(c["part_stride"])
                rb.region_stride.append(c["region_stride"])
    st = doc["stats"]
    resp.stats.operations = st["operations"]
    resp.stats.bytes = st["bytes"]
    resp.stats.copies_before_coalescing = st["copies_before_coalescing"]
    resp.stats.runs = st.get("runs", 0)
    return resp
