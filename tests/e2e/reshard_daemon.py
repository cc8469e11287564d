"""One reshardd process and its clients for the end-to-end tests
(reshard_e2e.py re-exports all of it): ``Daemon`` starts ``reshardd
--listen 127.0.0.1:0 --catalog memory``, reads the bound port back from its
``msg=listening`` log line and stops it with SIGTERM; ``Planner`` is a
grpcio stub built from ``channel.unary_unary`` calls."""

import os
import re
import signal
import subprocess
import sys
import threading
import time

import grpc

from reshard_env import DAEMON, VERBOSE, health_pb2, log, pb


# ---------------------------------------------------------------- daemon --

LISTEN_RE = re.compile(
    r"msg=\"?listening\b.*?\baddress=\"?(?:127\.0\.0\.1|localhost):(\d+)")
ANY_PORT_RE = re.compile(r"127\.0\.0\.1:(\d+)")
SANITIZER_RE = re.compile(r"ERROR: (Address|Leak)Sanitizer|runtime error:")


class DaemonError(RuntimeError):
    pass


class Daemon:
    """One reshardd process on 127.0.0.1 with an ephemeral port.

    ``Daemon(*flags)`` adds flags after ``--listen 127.0.0.1:0 --catalog
    memory``. RESHARDD_* variables of the caller's environment are removed
    so they cannot change the configuration under test. ``listen`` may be
    ``unix:PATH``; ``target`` is then that address.
    """

    def __init__(self, *flags, listen="127.0.0.1:0", catalog="memory"):
        if not DAEMON or not os.access(DAEMON, os.X_OK):
            raise DaemonError("RESHARD_E2E_DAEMON must name the reshardd "
                              "binary (run the tests through ctest)")
        self.argv = [DAEMON, "--listen", listen, "--catalog", catalog,
                     *flags]
        self.listen = listen
        self.proc = None
        self.port = None
        self.lines = []
        self._cond = threading.Condition()
        self._eof = False
        self._reader = None

    # -- lifecycle --
    def start(self, timeout=20.0):
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("RESHARDD_")}
        log("starting", " ".join(self.argv))
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, env=env)
        self._reader = threading.Thread(target=self._read_stderr,
                                        daemon=True)
        self._reader.start()
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                port = self._find_port()
                if port is not None:
                    self.port = port
                    break
                if self._eof:
                    code = self.proc.wait()
                    raise DaemonError(
                        "reshardd exited with %s before listening:\n%s"
                        % (code, self.log_text()))
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self.kill()
                    raise DaemonError(
                        "reshardd logged no listening address within %.0fs:"
                        "\n%s" % (timeout, self.log_text()))
                self._cond.wait(remaining)
        log("reshardd listening on port", self.port)
        return self

    def _read_stderr(self):
        for raw in self.proc.stderr:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            if VERBOSE:
                print("[reshardd %s] %s" % (self.proc.pid, line),
                      file=sys.stderr, flush=True)
            with self._cond:
                self.lines.append(line)
                self._cond.notify_all()
        self.proc.stderr.close()
        with self._cond:
            self._eof = True
            self._cond.notify_all()

    def _find_port(self):
        if self.listen.startswith("unix:"):
            # No port to find: listening is enough. 0 stands for "ready".
            ready = any(re.search(r'msg="?listening\b', line)
                        for line in self.lines)
            return 0 if ready else None
        for line in self.lines:
            m = LISTEN_RE.search(line)
            if m and int(m.group(1)) != 0:
                return int(m.group(1))
        # Tolerate another wording as long as a bound port is logged.
        for line in self.lines:
            if "listen" in line:
                for m in ANY_PORT_RE.finditer(line):
                    if int(m.group(1)) != 0:
                        return int(m.group(1))
        return None

    @property
    def target(self):
        if self.listen.startswith("unix:"):
            return self.listen
        return "127.0.0.1:%d" % self.port

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def signal(self, signum):
        if self.alive():
            self.proc.send_signal(signum)

    def wait(self, timeout=30.0):
        """Waits for the process to exit; returns its exit status."""
        code = self.proc.wait(timeout)
        if self._reader is not None:
            self._reader.join(5)
        return code

    def stop(self, timeout=30.0):
        """SIGTERM, then wait. Returns the exit status (negative: signal).
        Raises when the daemon's log carries a sanitizer report, so the
        ASan+UBSan build fails on any leak or undefined behaviour."""
        if self.proc is None:
            return None
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise DaemonError("reshardd did not exit within %.0fs of SIGTERM:"
                              "\n%s" % (timeout, self.log_text()))
        self.check_sanitizers()
        return code

    def check_sanitizers(self):
        """Raises DaemonError when the log holds a sanitizer report."""
        for line in self.log_lines():
            if SANITIZER_RE.search(line):
                raise DaemonError("reshardd reported a sanitizer error:\n%s"
                                  % self.log_text(200))

    def kill(self):
        if self.alive():
            self.proc.kill()
            self.proc.wait()

    def log_text(self, last=60):
        with self._cond:
            return "\n".join(self.lines[-last:])

    def log_lines(self):
        with self._cond:
            return list(self.lines)

    def wait_log_lines(self, match, count, timeout=10.0):
        """The log lines for which match(line) holds, once there are at
        least `count` of them (or the timeout passed): the daemon logs a
        call before it answers, but the reader thread may not have read
        that line yet when the answer arrives."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                found = [l for l in self.lines if match(l)]
                remaining = deadline - time.monotonic()
                if len(found) >= count or self._eof or remaining <= 0:
                    return found
                self._cond.wait(remaining)

    # -- clients --
    def channel(self):
        return grpc.insecure_channel(self.target, options=[
            ("grpc.max_receive_message_length", -1),
            ("grpc.max_send_message_length", -1),
            ("grpc.enable_retries", 0),
        ])

    def __enter__(self):
        return self.start()

    def __exit__(self, exc_type, *exc):
        try:
            code = self.stop()
            if exc_type is None and code not in (0, None):
                raise DaemonError("reshardd exited with %s:\n%s"
                                  % (code, self.log_text()))
        finally:
            self.kill()


# ------------------------------------------------------------------ stubs --

PLANNER_METHODS = {
    "PublishManifest": ("PublishManifestRequest", "PublishManifestResponse"),
    "GetManifest": ("GetManifestRequest", "GetManifestResponse"),
    "RegisterPages": ("RegisterPagesRequest", "RegisterPagesResponse"),
    "ForgetPages": ("ForgetPagesRequest", "ForgetPagesResponse"),
    "RegisterPlacement": ("RegisterPlacementRequest",
                          "RegisterPlacementResponse"),
    "PlanUpload": ("PlanUploadRequest", "PlanUploadResponse"),
    "PlanLoad": ("PlanLoadRequest", "PlanLoadResponse"),
    "PlanStore": ("PlanStoreRequest", "PlanStoreResponse"),
    "RegisterMemory": ("RegisterMemoryRequest", "RegisterMemoryResponse"),
    "ForgetMemory": ("ForgetMemoryRequest", "ForgetMemoryResponse"),
}


class Planner:
    """A stub over one channel: ``planner.PlanLoad(request, timeout=...)``."""

    def __init__(self, channel):
        self.channel = channel
        for name, (req, resp) in PLANNER_METHODS.items():
            setattr(self, name, channel.unary_unary(
                "/reshard.v1.Planner/" + name,
                request_serializer=getattr(pb, req).SerializeToString,
                response_deserializer=getattr(pb, resp).FromString))
        self.Check = channel.unary_unary(
            "/grpc.health.v1.Health/Check",
            request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
            response_deserializer=health_pb2.HealthCheckResponse.FromString)

    def raw(self, name):
        """A callable sending raw request bytes to Planner/<name>."""
        return self.channel.unary_unary("/reshard.v1.Planner/" + name)

    def health(self, service="", timeout=5.0):
        return self.Check(health_pb2.HealthCheckRequest(service=service),
                          timeout=timeout).status


def rpc_error(fn, *args, **kwargs):
    """Calls fn and returns the grpc.RpcError it raised (None on success)."""
    try:
        fn(*args, **kwargs)
    except grpc.RpcError as err:
        return err
    return None
