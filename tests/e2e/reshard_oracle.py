"""The SPEC §2.4 oracle of the end-to-end tests (reshard_e2e.py
re-exports all of it): ``build_parts`` writes the bytes of every Part of a
page from SPEC §1.3, ``execute_plan`` runs a plan's copies into bytearrays,
``expected_regions`` computes what the binding must hold afterwards and
``verify_plan`` checks a response against both, with the structure of
SPEC §2.2 (``check_plan_shape``, ``reference_runs``)."""

import struct
import zlib

from reshard_env import (DEFAULT_MAX_BATCH_BYTES, DEFAULT_MAX_BATCH_OPERATIONS,
                         KEY, pb)
from reshard_requests import canonical_shards, component_widths


# ------------------------------------------------------------ Part bytes --

_PATTERN = bytes((i * 7) % 255 + 1 for i in range(255)) * 24


def page_seed(page_key):
    return zlib.crc32(page_key.encode("utf-8"))


def value_row(pseed, token, layer, head, comp, hb):
    """The hb bytes of (page, token in page, layer, head, component): never
    zero, different from neighbouring rows and from their own shifts."""
    s = zlib.crc32(struct.pack("<IIIIB", pseed, token, layer, head, comp))
    s %= 255
    assert hb + s <= len(_PATTERN)
    return _PATTERN[s:s + hb]


def format_strides(fmt, nlayers, page_size, nheads, hb):
    """(layer, token, head) strides of one component block (SPEC §1.3)."""
    L, P, H = nlayers, page_size, nheads
    if fmt == pb.PLHD:
        return H * hb, L * H * hb, hb
    if fmt == pb.LPHD:
        return P * H * hb, H * hb, hb
    if fmt == pb.HPLD:
        return hb, L * hb, P * L * hb
    raise ValueError(fmt)


def build_parts(layout, page_key):
    """The bytes of every Part of page ``page_key`` stored in ``layout``."""
    d = layout.descriptor
    P = d.page_size
    pseed = page_seed(page_key)
    widths = component_widths(d)
    hbk = d.key_head_dim * d.itemsize
    hbv = d.value_head_dim * d.itemsize
    parts = []
    for sh in canonical_shards(layout):
        layers = sorted(sh.layer_ids)
        L, H = len(layers), sh.head_count
        buf = bytearray(L * P * H * (hbk + hbv))
        for comp, hb in widths:
            base = 0 if comp == KEY else L * P * H * hbk
            ls, ts, hs = format_strides(layout.format, L, P, H, hb)
            for li, layer in enumerate(layers):
                for t in range(P):
                    o0 = base + li * ls + t * ts
                    for hi in range(H):
                        o = o0 + hi * hs
                        buf[o:o + hb] = value_row(pseed, t, layer,
                                                  sh.head_start + hi, comp,
                                                  hb)
        parts.append(bytes(buf))
    return parts


class PartStore:
    """Part bytes per (page key, layout id), built on first use."""

    def __init__(self):
        self.layouts = {}
        self._parts = {}

    def add_layout(self, layout_id, layout):
        self.layouts[layout_id] = layout

    def parts(self, page_key, layout_id):
        key = (page_key, layout_id)
        if key not in self._parts:
            self._parts[key] = build_parts(self.layouts[layout_id], page_key)
        return self._parts[key]


# ------------------------------------------------------- plan execution --

class PlanCheckError(AssertionError):
    pass


def has_runs(resp):
    """True when the response carries strided runs (SPEC §2.2 step 7)."""
    return any(len(rb.run_count) for rb in resp.batches)


def batch_entries(rb, b=0):
    """[(page, part, part_offset, region, region_offset, nbytes, count,
    part_stride, region_stride)] of one RangeBatch, as sent; an explicit
    batch's entries are runs of 1 with strides 0."""
    n = len(rb.nbytes)
    cols = (rb.page_index, rb.part_index, rb.part_offset, rb.region_index,
            rb.region_offset)
    if any(len(c) != n for c in cols):
        raise PlanCheckError("batches[%d]: columns of different lengths" % b)
    runs = (rb.run_count, rb.part_stride, rb.region_stride)
    if any(len(c) for c in runs) and any(len(c) != n for c in runs):
        raise PlanCheckError("batches[%d]: run columns of different lengths"
                             % b)
    out = []
    for i in range(n):
        count, ps, rs = ((rb.run_count[i], rb.part_stride[i],
                          rb.region_stride[i]) if len(rb.run_count)
                         else (1, 0, 0))
        if count < 1:
            raise PlanCheckError("batches[%d].run_count[%d] is 0" % (b, i))
        out.append((rb.page_index[i], rb.part_index[i], rb.part_offset[i],
                    rb.region_index[i], rb.region_offset[i], rb.nbytes[i],
                    count, ps, rs))
    return out


def plan_copies(resp):
    """[(batch, page, part, part_offset, region, region_offset, nbytes)].
    Runs are expanded and each batch's copies sorted by the explicit key,
    which SPEC §2.2 step 7 says gives back exactly the explicit batch."""
    out = []
    for b, rb in enumerate(resp.batches):
        copies = []
        for (pi, part, po, ri, ro, n, count, ps, rs) in batch_entries(rb, b):
            for k in range(count):
                copies.append((b, pi, part, po + k * ps, ri, ro + k * rs, n))
        if len(rb.run_count):
            copies.sort()
        out.extend(copies)
    return out


def reference_runs(copies):
    """SPEC §2.2 step 7 written out independently of the daemon: the
    explicit copies of one batch [(page, part, part_offset, region,
    region_offset, nbytes)] split into classes of equal (page, part, region,
    nbytes), each taken in increasing part offset and folded greedily;
    entries ordered by their first copy's explicit key."""
    classes = {}
    for c in sorted(copies, key=lambda c: c[2]):
        classes.setdefault((c[0], c[1], c[3], c[5]), []).append(c)
    runs = []
    for members in classes.values():
        run = None
        for c in members:
            if run is not None:
                first, count, ps, rs = run
                if count == 1 and c[4] >= first[4]:
                    run = [first, 2, c[2] - first[2], c[4] - first[4]]
                    continue
                if (count > 1 and c[2] == first[2] + count * ps
                        and c[4] == first[4] + count * rs):
                    run[1] += 1
                    continue
                runs.append(run)
            run = [c, 1, 0, 0]
        runs.append(run)
    runs.sort(key=lambda r: (r[0][0], r[0][1], r[0][2], r[0][3], r[0][4]))
    return [tuple(first) + (count, ps, rs) for first, count, ps, rs in runs]


def execute_plan(resp, store, region_sizes):
    """Runs every copy of ``resp`` (memcpy from Part bytes to zeroed region
    buffers). Returns {region_id: bytearray}. Raises PlanCheckError for an
    index or a byte range outside its Part or region."""
    regions = {rid: bytearray(n) for rid, n in region_sizes.items()}
    if len(resp.pages) != resp.hit_pages:
        raise PlanCheckError("hit_pages %d but %d pages"
                             % (resp.hit_pages, len(resp.pages)))
    for rid in resp.region_ids:
        if rid not in regions:
            raise PlanCheckError("region_ids names unknown region %r" % rid)
    for (b, pi, part, po, ri, ro, n) in plan_copies(resp):
        if pi >= len(resp.pages) or ri >= len(resp.region_ids):
            raise PlanCheckError("batch %d: page_index %d / region_index %d "
                                 "out of range" % (b, pi, ri))
        page = resp.pages[pi]
        parts = store.parts(page.page_key, page.layout_id)
        if part >= len(parts):
            raise PlanCheckError("batch %d: part_index %d of %d parts"
                                 % (b, part, len(parts)))
        src = parts[part]
        dst = regions[resp.region_ids[ri]]
        if n == 0 or po + n > len(src) or ro + n > len(dst):
            raise PlanCheckError(
                "batch %d: copy part %d [%d,+%d) of %d bytes -> region %s "
                "[%d,+%d) of %d bytes" % (b, part, po, n, len(src),
                                          resp.region_ids[ri], ro, n,
                                          len(dst)))
        dst[ro:ro + n] = src[po:po + n]
    return regions


def expected_regions(desc, binding, page_keys, hit_pages):
    """What the binding's regions hold when the first ``hit_pages`` pages
    are loaded: every (token, head) value of every range, zero elsewhere.
    Also returns the number of bytes the binding covers in those pages."""
    regions = {rid: bytearray(n) for rid, n in binding.region_sizes.items()}
    P = desc.page_size
    widths = dict(component_widths(desc))
    seeds = [page_seed(k) for k in page_keys]
    covered = 0
    for r in binding.message.ranges:
        hb = widths[r.component]
        buf = regions[r.region_id]
        for dt in range(r.token_count):
            tok = r.token_start + dt
            page = tok // P
            if page >= hit_pages:
                continue
            t = tok % P
            o0 = r.offset_bytes + dt * r.token_stride_bytes
            for dh in range(r.head_count):
                o = o0 + dh * r.head_stride_bytes
                buf[o:o + hb] = value_row(seeds[page], t, r.global_layer_id,
                                          r.head_start + dh, r.component, hb)
                covered += hb
    return regions, covered


def describe_mismatch(actual, expected, binding, desc):
    for rid, exp in expected.items():
        got = actual[rid]
        if got == exp:
            continue
        at = next(i for i in range(len(exp)) if got[i] != exp[i])
        where = "outside every range"
        widths = dict(component_widths(desc))
        for r in binding.message.ranges:
            if r.region_id != rid:
                continue
            hb = widths[r.component]
            rel = at - r.offset_bytes
            if rel < 0:
                continue
            dt, rest = divmod(rel, r.token_stride_bytes)
            dh, byte = divmod(rest, r.head_stride_bytes)
            if dt < r.token_count and dh < r.head_count and byte < hb:
                where = ("layer %d %s token %d head %d byte %d"
                         % (r.global_layer_id,
                            "K" if r.component == KEY else "V",
                            r.token_start + dt, r.head_start + dh, byte))
                break
        return ("region %s differs first at offset %d (%s): got %d, "
                "expected %d" % (rid, at, where, got[at], exp[at]))
    return None


def check_plan_shape(resp, limits=None):
    """Structural checks of SPEC §2.2 steps 4-5 and 7 and of the stats:
    copies sorted by (page, part, part_offset, region, region_offset); no
    two neighbours inside a batch could be merged; batches within their
    budgets and filled except the last; stats and batch bytes add up. With
    runs, on the expanded copies of each batch, plus: each batch's entries
    are exactly the greedy fold of its copies (``reference_runs``)."""
    max_ops = (limits.max_batch_operations if limits is not None
               and limits.max_batch_operations else
               DEFAULT_MAX_BATCH_OPERATIONS)
    max_bytes = (limits.max_batch_bytes if limits is not None
                 and limits.max_batch_bytes else DEFAULT_MAX_BATCH_BYTES)
    copies = plan_copies(resp)
    per_batch = [[] for _ in resp.batches]
    for c in copies:
        per_batch[c[0]].append(c[1:])
    total = 0
    for b, rb in enumerate(resp.batches):
        ops = len(per_batch[b])
        s = sum(c[5] for c in per_batch[b])
        if s != rb.bytes:
            raise PlanCheckError("batches[%d].bytes %d != sum %d"
                                 % (b, rb.bytes, s))
        if ops == 0:
            raise PlanCheckError("batches[%d] is empty" % b)
        if ops > max_ops or rb.bytes > max_bytes:
            raise PlanCheckError("batches[%d]: %d copies / %d bytes over the "
                                 "budget %d / %d" % (b, ops, rb.bytes,
                                                     max_ops, max_bytes))
        if b + 1 < len(resp.batches) and not (ops == max_ops
                                              or rb.bytes == max_bytes):
            raise PlanCheckError("batches[%d] is short (%d copies, %d bytes)"
                                 " but is not the last" % (b, ops, rb.bytes))
        if has_runs(resp):
            want = reference_runs(per_batch[b])
            got = batch_entries(rb, b)
            if got != want:
                raise PlanCheckError(
                    "batches[%d]: runs differ from the SPEC §2.2 step 7 fold "
                    "of its copies: %d entries, expected %d; first "
                    "difference %r" % (b, len(got), len(want),
                                       next((g, w) for g, w in
                                            zip(got + [None], want + [None])
                                            if g != w)))
        total += s
    entries = sum(len(rb.nbytes) for rb in resp.batches)
    if resp.stats.runs != (entries if has_runs(resp) else 0):
        raise PlanCheckError("stats.runs %d, the batches hold %d entries%s"
                             % (resp.stats.runs, entries,
                                "" if has_runs(resp) else " and no runs"))
    st = resp.stats
    if st.operations != len(copies) or st.bytes != total:
        raise PlanCheckError("stats operations=%d bytes=%d but the batches "
                             "hold %d copies, %d bytes"
                             % (st.operations, st.bytes, len(copies), total))
    if st.copies_before_coalescing < len(copies) - (len(resp.batches) - 1):
        raise PlanCheckError("copies_before_coalescing %d below %d copies"
                             % (st.copies_before_coalescing, len(copies)))
    for i in range(1, len(copies)):
        prev, cur = copies[i - 1], copies[i]
        if prev[1:6] > cur[1:6]:
            raise PlanCheckError("copies %d and %d are out of order: %r %r"
                                 % (i - 1, i, prev, cur))
        contiguous = (prev[1] == cur[1] and prev[2] == cur[2]
                      and prev[4] == cur[4]
                      and prev[3] + prev[6] == cur[3]
                      and prev[5] + prev[6] == cur[5])
        if contiguous and prev[0] == cur[0]:
            raise PlanCheckError("copies %d and %d continue each other and "
                                 "were not coalesced: %r %r"
                                 % (i - 1, i, prev, cur))
        if contiguous and resp.batches[prev[0]].bytes != max_bytes:
            raise PlanCheckError("copy %d was split across batches %d and %d"
                                 " but batch %d is not full by bytes"
                                 % (i, prev[0], cur[0], prev[0]))


def verify_plan(resp, store, desc, binding, page_keys, limits=None):
    """Executes the plan and checks it against the oracle. Returns the
    number of bytes copied."""
    check_plan_shape(resp, limits)
    for i, page in enumerate(resp.pages):
        if page.page_key != page_keys[i]:
            raise PlanCheckError("pages[%d].page_key %r, expected %r"
                                 % (i, page.page_key, page_keys[i]))
    actual = execute_plan(resp, store, binding.region_sizes)
    expected, covered = expected_regions(desc, binding, page_keys,
                                         resp.hit_pages)
    problem = describe_mismatch(actual, expected, binding, desc)
    if problem is not None:
        raise PlanCheckError(problem)
    if resp.stats.bytes != covered:
        raise PlanCheckError("the plan moves %d bytes; the binding covers %d"
                             % (resp.stats.bytes, covered))
    return covered
