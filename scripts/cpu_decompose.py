"""scripts/load.py --decompose: the daemon's CPU per call, decomposed.

Issue 26 item 4 asks load.py to split the daemon's CPU per call of the
measured request (PlanLoad or PlanTransfer) into

* an empty Health/Check's CPU per call (the ceiling run of the same load),
* in-process planning of the same request,
* the kernel's send of the response (from perf),

and to say whether what is left, the remainder, is at most 5 us.

How each figure is had:

* Daemon CPU and Check CPU per call: load.py's own figures (the CPU of
  every daemon thread around the run, from the process's CPU clock in
  nanoseconds: load_daemon.cpu_seconds; over the calls), the medians over
  --repeat pairs. Not profiled: perf runs apart.
* Planning: reshard-bench, the scenario of the same name and size
  (``reshard-bench RUNS S1 8`` for load.py's S1-8; T1 with the tokens for
  T1-128), run right after each pair's measured run, so that it runs in
  the same phase of the machine as that pair (a shared host has minutes
  in which everything, reshard-bench too, runs up to 1.7 times slower:
  docs/performance.md, Round 48); the figure printed is the pair's of
  median time. It builds the request with bench/scenario.c, which lays out the
  pool as deploy/ghz/pooled_scenarios.py does (same copies; the block table
  is scattered by another generator, so the runs may differ a little: both
  counts are printed). It is not the very request bytes load.py sends —
  those name a pool and manifests only the daemon holds — so the output
  says which rows were used:
  - pooled PlanLoad: the pooled table's per call decode (memory id and
    block table) + plan, or with --runs its "pooled with runs" plan; plus
    the encoding of that plan's own response, as the daemon encodes it
    (with runs written whole; without, the long varint columns referenced
    where the plan wrote them and the rest copied). Without runs the plan
    is the pooled table's "columns" one: varint columns written while
    batching and no copies, as the daemon plans. (Until Round 46 the
    encoding was the encoding table's "layer" row: another plan's, timed
    with the page keys' names built and, without runs, the columns copied
    whole; for S1-8 1.5 µs more than the daemon's without runs, 0.8 with.)
  - PlanLoad with an explicit binding: the "pool" row's binding decode +
    validation, then its plan + encoding (columns, or runs).
  - PlanTransfer: the transfer table's warm plan with runs plus its runs
    response's encoding ("runs enc"), or without runs its "columns" plan
    and response, as the daemon answers. (Until Round 49 only the plan,
    leaving the response's encoding in the remainder: 3.9 µs of T1-128's
    with runs.)
  Beside it, the daemon's own plan timer over the measured runs
  (reshard_plan_duration_seconds: sum / count; the plan only, no decoding
  or encoding, wall time in whole microseconds per call) and the remainder
  it would give.
* Kernel send: after the measured pairs, one more run of each (the Check
  and the measured request, same load) under ``perf record -e cpu-clock -g
  -p PID``; a sample whose kernel call chain passes through the send path
  (sock_sendmsg, tcp_sendmsg, __sys_sendmsg, ... and so everything they
  call: the loopback transmit and the receiving socket's softirq, charged
  to the sender) is a send sample. Share of samples x the measured CPU per
  call is the send per call. The Check's own send is inside the Check's
  CPU already, so the decomposition subtracts the send beyond the Check's.
  The same profiles split each call into send, planning (a sample with
  the planner or the response's encoding among its callers: reshardd keeps
  its frame pointers for this), other kernel and user space, so the
  remainder splits exactly into three: planning in the daemon under the
  load beyond reshard-bench's figure for it alone (profile - bench), other
  kernel (PlanLoad - Check) and user space beside the planner (PlanLoad -
  Check). The other kernel work splits by what the thread was doing
  (KERNEL_PATHS): the futex, epoll and eventfd calls of the hand-offs
  between the daemon's threads, socket reads, rescheduling on the way
  back to user space, and the rest; user space by object.
* Pair by pair: each pair's own remainder, from its daemon CPU, its
  Check's and the reshard-bench run after it, the sends at the profiles'
  shares of each; their median is the figure a phase change in the
  middle of a run moves least.

Anything missing (perf absent or refused, reshard-bench not found, a table
not parsed) is printed as skipped with the reason and leaves the remainder
unknown; it never fails the run.
"""

import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import time

from call_instructions import ENCODING, PLANNING

GOAL_US = 5.0
# Kernel functions of the send path; a sample under any of them is a send.
SEND_FRAMES = frozenset([
    "sock_sendmsg", "__sock_sendmsg", "sock_write_iter", "____sys_sendmsg",
    "___sys_sendmsg", "__sys_sendmsg", "__x64_sys_sendmsg",
    "__sys_sendmmsg", "__x64_sys_sendmmsg", "__sys_sendto",
    "__x64_sys_sendto", "tcp_sendmsg", "tcp_sendmsg_locked",
    "unix_stream_sendmsg", "inet_sendmsg"])
# The kernel's other work, by what the thread was doing: the hand-offs
# between the daemon's threads (futex waits and wakes, epoll, the eventfd
# writes and reads that wake the loop), reading sockets, and being
# rescheduled on the way back to user space. First match wins; the rest
# (page faults, timers) is "other".
KERNEL_PATHS = (
    ("futex", frozenset(["__x64_sys_futex", "do_futex"])),
    ("epoll", frozenset(["do_epoll_wait", "__x64_sys_epoll_wait",
                         "__x64_sys_epoll_pwait"])),
    ("eventfd", frozenset(["eventfd_write", "eventfd_read"])),
    ("recv", frozenset(["__sys_recvmsg", "sock_recvmsg", "tcp_recvmsg",
                        "unix_stream_recvmsg", "__sys_recvfrom"])),
    ("rescheduled", frozenset(["exit_to_user_mode_loop",
                               "irqentry_exit_to_user_mode"])),
)
# The planner and the response's encoding, as call_instructions.py counts
# them: a sample with one of these among its callers is planning. perf's
# frame-pointer walk finds them because reshardd keeps its frame pointers
# (RESHARD_FRAME_POINTERS, on by default).
PLANNING_FRAMES = frozenset(PLANNING + ENCODING)
# reshard__planner_pack_response ends in a tail call (a jmp, its frame
# gone) to reshard_call_pack_encoded, which writes a whole response (with
# runs, or without response memory); the same function packs the Check's
# reply too. Under a plan's work function it is encoding.
PACK_FRAME = "reshard_call_pack_encoded"
WORK_FRAMES = frozenset(["load_work", "store_work", "transfer_work"])
KERNEL_BASE = 0xffff800000000000
PLAN_SUM_RE = r'^reshard_plan_duration_seconds_(sum|count)\{method="%s"\} (\S+)$'
VARIANT_RE = re.compile(r"^([ST]\d)(?:-(\d+))?$", re.I)
NUMBER_RE = re.compile(r"(-?[\d.]+)(us)?$")


def add_arguments(parser):
    parser.add_argument("--decompose", action="store_true",
                        help="print the daemon's CPU per call decomposed: "
                             "empty Check, in-process planning "
                             "(reshard-bench), kernel send (perf), remainder "
                             "(scripts/cpu_decompose.py)")
    parser.add_argument("--bench", help="with --decompose: reshard-bench "
                        "(default: BUILD/bench/reshard-bench beside "
                        "BUILD/daemon/reshardd)")
    parser.add_argument("--bench-runs", type=int, default=200,
                        help="with --decompose: plans per reshard-bench row")
    parser.add_argument("--perf", default="perf",
                        help="with --decompose: the perf binary")


def check_arguments(parser, args):
    if not args.decompose:
        return
    if not args.daemon:
        parser.error("--decompose goes with --daemon (it reads the daemon's "
                     "CPU and attaches perf to it)")
    if not args.ceiling:
        parser.error("--decompose needs the Check ceiling (drop --no-ceiling)")
    if args.method not in ("PlanLoad", "PlanTransfer"):
        parser.error("--decompose goes with --method PlanLoad or PlanTransfer")


# ---------------------------------------------------------------- perf --

def _perf_unavailable(perf):
    if shutil.which(perf) is None:
        return "%s not found (apt-get install linux-perf)" % perf
    return None


def profile(perf, pid, directory, label, run):
    """Runs `run()` (an h2load run) with perf recording `pid`; returns
    (run's result, profile dict). The profile is {"error": why} when perf
    could not record; run() runs either way."""
    why = _perf_unavailable(perf)
    if why:
        return run(), {"error": why}
    data = os.path.join(directory, "perf-%s.data" % label)
    log = os.path.join(directory, "perf-%s.log" % label)
    with open(log, "wb") as logf:
        try:
            proc = subprocess.Popen(
                [perf, "record", "-q", "-e", "cpu-clock", "-F", "10000", "-g",
                 "-p", str(pid), "-o", data], stdin=subprocess.DEVNULL,
                stdout=logf, stderr=subprocess.STDOUT)
        except OSError as exc:
            return run(), {"error": "perf record: %s" % exc}
        # perf opens its events on every thread before it writes the file.
        deadline = time.monotonic() + 5.0
        while (proc.poll() is None and not os.path.exists(data)
               and time.monotonic() < deadline):
            time.sleep(0.02)
        time.sleep(0.2)
        try:
            result = run()
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    if proc.returncode not in (0, -signal.SIGINT, 130) or not os.path.exists(
            data):
        with open(log, "rb") as f:
            text = f.read().decode("utf-8", "replace").strip()
        return result, {"error": "perf record exited %s: %s"
                        % (proc.returncode, text[-300:])}
    return result, parse_profile(perf, data)


def parse_profile(perf, data):
    """Samples of a `perf record -g` file: total, under the send path,
    under the planner (user space or the kernel, a page fault), elsewhere
    in the kernel, elsewhere in user space; the top leaf symbols."""
    try:
        proc = subprocess.run([perf, "script", "-i", data, "-F",
                               "ip,sym,dso"],
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, timeout=300, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"error": "perf script: %s" % exc}
    if proc.returncode != 0:
        return {"error": "perf script exited %d: %s" % (
            proc.returncode, proc.stderr.decode("utf-8", "replace")[-300:])}
    counts = {"samples": 0, "send": 0, "planning": 0, "kernel_other": 0,
              "user": 0}
    # User space beside the planner by the leaf's object: reshardd's own
    # code (wire, handlers: linked in), libc (memmove, malloc), the other
    # libraries (gRPC, absl, protobuf-c, libuv) and what perf could not
    # name.
    libs = {"reshardd": 0, "libc": 0, "libraries": 0}
    paths = dict.fromkeys([name for name, _ in KERNEL_PATHS] + ["other"], 0)
    leaves = {}

    def flush(frames):
        if not frames:
            return
        counts["samples"] += 1
        ip, sym, dso = frames[0]
        kernel = set(s for a, s, _ in frames if a >= KERNEL_BASE)
        user = set(s for a, s, _ in frames if a < KERNEL_BASE)
        if kernel & SEND_FRAMES:
            kind = "send"
        elif user & PLANNING_FRAMES or (PACK_FRAME in user
                                        and user & WORK_FRAMES):
            kind = "planning"
        elif ip >= KERNEL_BASE:
            kind = "kernel_other"
            paths[next((path for path, names in KERNEL_PATHS
                        if kernel & names), "other")] += 1
        else:
            kind = "user"
            name = os.path.basename(dso)
            libs["reshardd" if name == "reshardd" else "libc"
                 if name.startswith("libc.so") else "libraries"] += 1
        counts[kind] += 1
        key = (kind, sym)
        leaves[key] = leaves.get(key, 0) + 1

    frames = []
    for line in proc.stdout.decode("utf-8", "replace").splitlines():
        parts = line.split(None, 1)
        if not parts:
            flush(frames)
            frames = []
            continue
        try:
            ip = int(parts[0], 16)
        except ValueError:
            continue
        rest = parts[1].strip() if len(parts) > 1 else "?"
        dso = ""
        if rest.endswith(")") and " (" in rest:
            rest, _, dso = rest[:-1].rpartition(" (")
        frames.append((ip, rest.split("+0x")[0], dso))
    flush(frames)
    if counts["samples"] == 0:
        return {"error": "perf recorded no samples of the daemon"}
    top = sorted(leaves.items(), key=lambda kv: -kv[1])[:15]
    counts["user_by_object"] = libs
    counts["kernel_by_path"] = paths
    counts["top"] = [{"kind": k, "symbol": s, "samples": n}
                     for (k, s), n in top]
    return counts


# ------------------------------------------------------------ planning --

def default_bench(daemon):
    build = os.path.dirname(os.path.dirname(os.path.abspath(daemon)))
    return os.environ.get("RESHARD_BENCH") or os.path.join(
        build, "bench", "reshard-bench")


def _numbers(segment):
    out = []
    for token in segment.split():
        m = NUMBER_RE.match(token)
        if m:
            try:
                out.append(float(m.group(1)))
            except ValueError:
                pass
    return out


def parse_bench(text, prefix):
    """The rows of `prefix` (e.g. "S1") in reshard-bench's tables:
    {table: {memory or "": [segments of numbers]}}."""
    tables = {}
    section = None
    for line in text.splitlines():
        if line.startswith("planning and response encoding"):
            section = "encoding"
        elif line.startswith("the reader's binding, decoded"):
            section = "decode"
        elif line.startswith("decoded, validated and planned"):
            section = "pooled"
        elif line.startswith("transfer plans"):
            section = "transfer"
        words = line.split()
        if section is None or not words or words[0] != prefix:
            continue
        segments = line.split("|")
        memory = ""
        if section in ("encoding", "decode"):
            memory = segments[0].split()[-1]
        tables.setdefault(section, {})[memory] = [_numbers(s)
                                                  for s in segments]
    return tables


def bench_planning(bench, runs, scenario, method, pooled, with_runs):
    """In-process planning of the scenario of the same name and size, in
    microseconds, from reshard-bench: {"us", "command", "rows", "parts",
    "entries"} or {"error"}."""
    m = VARIANT_RE.match(scenario)
    if not m:
        return {"error": "scenario %r has no reshard-bench row" % scenario}
    prefix, size = m.group(1).upper(), m.group(2) or "0"
    if not os.access(bench, os.X_OK):
        return {"error": "%s not found (build reshard-bench or pass --bench)"
                % bench}
    argv = [bench, str(max(2, runs)), prefix, size]
    command = " ".join([os.path.basename(bench)] + argv[1:])
    try:
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=600, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"error": "%s: %s" % (command, exc), "command": command}
    text = proc.stdout.decode("utf-8", "replace")
    if proc.returncode != 0:
        return {"error": "%s exited %d: %s" % (
            command, proc.returncode,
            proc.stderr.decode("utf-8", "replace")[-300:]), "command": command}
    t = parse_bench(text, prefix)
    try:
        if method == "PlanTransfer":
            row = t["transfer"][""]
            # | cold warm ns/cp | runs cold warm ns/run cp/run | copies
            # columns ns/cp x held whole | runs enc ns/run | repeated
            if with_runs:
                parts = {"plan with runs (warm)": row[2][2],
                         "encode its runs": row[4][0]}
                entries = int(row[2][0])
                rows = "transfer table, warm plan with runs and its runs " \
                       "response"
            else:
                # As the daemon answers: varint columns written while
                # batching, and the response around them.
                parts = {"plan and response (varint columns)": row[3][1]}
                entries = None
                rows = "transfer table, the columns plan and its response"
        elif pooled:
            row = t["pooled"][""]
            # pooled: decode check ns/id plan ns/cp total fewer |
            # columns ns/cp encode | plan runs ns/run encode
            parts = {"decode (memory id, block table)": row[2][0]}
            if with_runs:
                parts["plan with runs"] = row[4][0]
                parts["encode its runs"] = row[4][3]
                entries = int(row[4][1])
            else:
                # The daemon's plan: varint columns while batching, no
                # copies; its response then sends the long columns where
                # they lie and copies the rest.
                parts["plan (varint columns, checks the table)"] = row[3][0]
                parts["encode its columns as pieces"] = row[3][2]
                entries = None
            rows = ("pooled table, per call, %s plan and its own response"
                    % ("with runs" if with_runs else "the columns"))
        else:
            dec = t["decode"]["pool"]
            enc = t["encoding"]["pool"]
            parts = {"binding decode": dec[2][0], "validate": dec[3][0]}
            seg = enc[3] if with_runs else enc[1]
            parts["plan"] = seg[0]
            parts["encode"] = seg[1]
            entries = int(seg[2]) if with_runs else None
            rows = ("decode table and encoding table, pool row%s"
                    % (", with runs" if with_runs else ", columns"))
    except (KeyError, IndexError, ValueError) as exc:
        return {"error": "%s: row not found in its output (%r)"
                % (command, exc), "command": command}
    return {"us": sum(parts.values()), "parts": parts, "rows": rows,
            "command": command, "entries": entries}


def pair_planning(args):
    """bench_planning for load.py's arguments: run beside each measured
    pair, so that planning is timed in the same phase of the machine as
    the pair's daemon CPU (on a shared host whole minutes run slower,
    reshard-bench included: 1.7 times on Round 48's)."""
    return bench_planning(args.bench or default_bench(args.daemon),
                          args.bench_runs, args.scenario, args.method,
                          args.pooled, args.runs)


def plan_timer(metrics_text, method):
    """(seconds, plans) of the daemon's own plan timer for `method`."""
    out = {}
    for kind, value in re.findall(PLAN_SUM_RE % re.escape(method),
                                  metrics_text, re.M):
        out[kind] = float(value)
    return out.get("sum", 0.0), out.get("count", 0.0)


# ---------------------------------------------------------- decompose --

def _finite(x):
    return x is not None and isinstance(x, (int, float)) and math.isfinite(x)


def _median_planning(pairs):
    """Of the pairs' reshard-bench figures, the one of median time; when
    none has a time, the first error."""
    timed = sorted((p for p in pairs if _finite(p.get("us"))),
                   key=lambda p: p["us"])
    if not timed:
        return next((p for p in pairs if "error" in p),
                    {"error": "reshard-bench was not run"})
    return timed[(len(timed) - 1) // 2]


def decompose(args, result, raw):
    """The decomposition from load.py's result and the raw figures
    gathered during the run (raw: plan timer before/after, profiles, and
    each pair's daemon CPU, Check CPU and reshard-bench planning)."""
    cpu = result.get("cpu_us_per_call")
    check = result.get("ceiling_cpu_us_per_call")
    d = {"goal_us": GOAL_US, "cpu_us": cpu, "check_us": check}
    pairs = raw.get("pairs", [])
    plan = _median_planning([p["planning"] for p in pairs])
    d["planning"] = plan
    seconds, plans = raw.get("plan_timer", (0.0, 0.0))
    if plans > 0:
        d["daemon_plan_timer_us"] = 1e6 * seconds / plans
        d["daemon_plan_timer_plans"] = int(plans)
    prof_main, prof_check = raw.get("profile_main"), raw.get("profile_check")
    d["profile"] = {"main": prof_main, "check": prof_check}
    split = {}
    for name, prof, per_call in (("main", prof_main, cpu),
                                 ("check", prof_check, check)):
        if (prof and "error" not in prof and prof.get("samples")
                and _finite(per_call)):
            n = float(prof["samples"])
            split[name] = {k: per_call * prof[k] / n
                           for k in ("send", "planning", "kernel_other",
                                     "user")}
            split[name + "_user"] = {
                k: per_call * v / n
                for k, v in prof.get("user_by_object", {}).items()}
            split[name + "_kernel"] = {
                k: per_call * v / n
                for k, v in prof.get("kernel_by_path", {}).items()}
    d["split_us"] = split
    if "main" in split and "check" in split:
        d["send_us"] = split["main"]["send"]
        d["check_send_us"] = split["check"]["send"]
        d["send_beyond_check_us"] = d["send_us"] - d["check_send_us"]
    else:
        why = [p["error"] for p in (prof_main, prof_check)
               if p and "error" in p]
        d["send_error"] = why[0] if why else "no profile"
    if (_finite(cpu) and _finite(check) and _finite(plan.get("us"))
            and _finite(d.get("send_beyond_check_us"))):
        d["remainder_us"] = (cpu - check - plan["us"]
                             - d["send_beyond_check_us"])
        d["remainder_ok"] = d["remainder_us"] <= GOAL_US
        # What planning cost in the daemon under the load, from the
        # profile, beyond what reshard-bench measured of it alone.
        d["daemon_planning_us"] = (split["main"]["planning"]
                                   - split["check"]["planning"])
        d["remainder_planning_us"] = d["daemon_planning_us"] - plan["us"]
        d["remainder_kernel_us"] = (split["main"]["kernel_other"]
                                    - split["check"]["kernel_other"])
        d["remainder_user_us"] = (split["main"]["user"]
                                  - split["check"]["user"])
        mk, ck = split.get("main_kernel", {}), split.get("check_kernel", {})
        if mk and ck:
            d["remainder_kernel_by_path_us"] = {k: mk[k] - ck[k] for k in mk}
        mu, cu = split.get("main_user", {}), split.get("check_user", {})
        if mu and cu:
            d["remainder_user_by_object_us"] = {k: mu[k] - cu[k] for k in mu}
        if "daemon_plan_timer_us" in d:
            d["remainder_with_timer_us"] = (
                d["remainder_us"] + plan["us"] - d["daemon_plan_timer_us"])
    # Each pair's own remainder, from its own daemon and Check CPU and the
    # reshard-bench run right after it, the send at the profiles' shares.
    if prof_main and prof_check and "send_us" in d:
        main_share = float(prof_main["send"]) / prof_main["samples"]
        check_share = float(prof_check["send"]) / prof_check["samples"]
        rows = []
        for p in pairs:
            if not all(_finite(x) for x in (p.get("cpu_us"), p.get("check_us"),
                                            p["planning"].get("us"))):
                continue
            send = main_share * p["cpu_us"] - check_share * p["check_us"]
            rows.append({"cpu_us": p["cpu_us"], "check_us": p["check_us"],
                         "planning_us": p["planning"]["us"],
                         "send_beyond_check_us": send,
                         "remainder_us": p["cpu_us"] - p["check_us"]
                         - p["planning"]["us"] - send})
        if rows:
            d["pairs"] = rows
            d["pair_remainder_us"] = statistics.median(
                r["remainder_us"] for r in rows)
            d["pair_remainder_ok"] = d["pair_remainder_us"] <= GOAL_US
    return d


def report(r, out):
    d = r.get("decomposition")
    if d is None:
        return
    method = r["method"]
    print("  decomposed   the daemon's CPU per %s (issue 26 item 4)" % method,
          file=out)

    def row(sign, label, value, note=""):
        text = "%8.1f us" % value if _finite(value) else "%11s" % "skipped"
        print("    %s %-34s %s%s" % (sign, label, text,
                                     "  " + note if note else ""), file=out)

    row(" ", "daemon CPU per %s" % method, d["cpu_us"],
        "(measured, the process's CPU clock)")
    row("-", "empty Check", d["check_us"], "(measured, the ceiling run)")
    plan = d["planning"]
    if "error" in plan:
        row("-", "in-process planning", None, plan["error"])
    else:
        row("-", "in-process planning", plan["us"],
            "(%s: %s; %s)" % (plan["command"], ", ".join(
                "%s %.1f" % kv for kv in plan["parts"].items()),
                plan["rows"]))
    if "send_beyond_check_us" in d:
        m, c = d["profile"]["main"], d["profile"]["check"]
        row("-", "kernel send beyond the Check's", d["send_beyond_check_us"],
            "(perf: %.1f %% of %d samples under sendmsg = %.1f us per %s; "
            "Check %.1f %% of %d = %.1f us)"
            % (100.0 * m["send"] / m["samples"], m["samples"], d["send_us"],
               method, 100.0 * c["send"] / c["samples"], c["samples"],
               d["check_send_us"]))
    else:
        row("-", "kernel send beyond the Check's", None, d["send_error"])
    if "remainder_us" in d:
        row("=", "remainder", d["remainder_us"],
            "%s %.0f us: %s" % ("<=" if d["remainder_ok"] else ">",
                                d["goal_us"],
                                "yes" if d["remainder_ok"] else "NO"))
        print("      of which planning under the load beyond reshard-bench's "
              "%+.1f us (the profile: %.1f us under the planner), other "
              "kernel %+.1f us (%s - Check), user space beside the planner "
              "%+.1f us (%s - Check), from the same profiles"
              % (d["remainder_planning_us"], d["daemon_planning_us"],
                 d["remainder_kernel_us"], method, d["remainder_user_us"],
                 method), file=out)
        paths = d.get("remainder_kernel_by_path_us")
        if paths:
            print("      other kernel by path: %s" % ", ".join(
                "%s %+.1f us" % kv for kv in paths.items()), file=out)
        by = d.get("remainder_user_by_object_us")
        if by:
            print("      user space by object: reshardd's own code %+.1f us, "
                  "libc %+.1f us, gRPC and other libraries %+.1f us"
                  % (by["reshardd"], by["libc"], by["libraries"]), file=out)
    else:
        row("=", "remainder", None, "(a figure above is missing)")
    if "daemon_plan_timer_us" in d:
        print("      the daemon's own plan timer: %.1f us per plan over %d "
              "plans (reshard_plan_duration_seconds, wall, plan only)%s"
              % (d["daemon_plan_timer_us"], d["daemon_plan_timer_plans"],
                 "; remainder with it %.1f us" % d["remainder_with_timer_us"]
                 if "remainder_with_timer_us" in d else ""), file=out)
    rows = d.get("pairs")
    if rows:
        print("      pair by pair (reshard-bench right after each): Check "
              "%s us, %s %s us, planning %s us, remainder %s us; median "
              "%.1f us %s %.0f us: %s"
              % (", ".join("%.1f" % x["check_us"] for x in rows), method,
                 ", ".join("%.1f" % x["cpu_us"] for x in rows),
                 ", ".join("%.1f" % x["planning_us"] for x in rows),
                 ", ".join("%.1f" % x["remainder_us"] for x in rows),
                 d["pair_remainder_us"],
                 "<=" if d["pair_remainder_ok"] else ">", d["goal_us"],
                 "yes" if d["pair_remainder_ok"] else "NO"), file=out)
    entries = plan.get("entries")
    if entries is not None and r["plan"].get("runs"):
        print("      runs: %d in reshard-bench's plan, %d in the daemon's"
              % (entries, r["plan"]["runs"]), file=out)
