"""Fixtures for the reshard package's tests.

``daemon`` starts ``$RESHARD_PYTEST_DAEMON --listen 127.0.0.1:0 --catalog
memory`` once per session and reads the port from its ``msg=listening``
log line. Without the variable every test that needs a daemon fails (it
does not skip).

Skips: none is allowed. Every feature the tests exercise is in the daemon
they start, so a skip can only hide a failure: any skip fails the run.
"""

import os
import re
import signal
import socket
import subprocess
import threading
import time
from typing import Iterator, List, Optional

import pytest

import reshard

DAEMON = os.environ.get("RESHARD_PYTEST_DAEMON", "")
_LISTEN = re.compile(r"msg=\"?listening\b.*?\baddress=\"?127\.0\.0\.1:(\d+)")


class Daemon:
    """A reshardd process on loopback (port 0 unless ``port`` is given)."""

    def __init__(self, port: int = 0, *flags: str) -> None:
        if not DAEMON or not os.access(DAEMON, os.X_OK):
            raise RuntimeError("RESHARD_PYTEST_DAEMON must name the reshardd "
                               "binary (ctest and scripts/test.sh set it)")
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("RESHARDD_")}
        self.proc = subprocess.Popen(
            [DAEMON, "--listen", "127.0.0.1:%d" % port, "--catalog",
             "memory", *flags], stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        self.lines: List[str] = []
        self.port: Optional[int] = None
        self._ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        if not self._ready.wait(20) or self.port is None:
            self.stop()
            raise RuntimeError("reshardd did not listen:\n"
                               + "\n".join(self.lines[-30:]))

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            self.lines.append(line)
            m = _LISTEN.search(line)
            if m and self.port is None:
                self.port = int(m.group(1))
                self._ready.set()
        self._ready.set()

    @property
    def target(self) -> str:
        return "127.0.0.1:%d" % self.port

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


def free_port() -> int:
    """A loopback port the OS had free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def daemon() -> Iterator[Daemon]:
    d = Daemon()
    yield d
    code = d.stop()
    report = [ln for ln in d.lines
              if "Sanitizer" in ln or "runtime error:" in ln]
    assert code == 0 and not report, "reshardd exited with %s:\n%s" % (
        code, "\n".join(d.lines[-40:]))


@pytest.fixture
def client(daemon: Daemon) -> Iterator[reshard.Client]:
    with reshard.Client(daemon.target, timeout=60) as c:
        yield c


_BAD_SKIPS: List[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and not hasattr(report, "wasxfail"):
        reason = str(report.longrepr[2] if isinstance(report.longrepr, tuple)
                     else report.longrepr)
        reason = reason.replace("Skipped: ", "", 1)
        _BAD_SKIPS.append("%s: %s" % (report.nodeid, reason))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _BAD_SKIPS and exitstatus == 0:
        session.exitstatus = 1


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if _BAD_SKIPS:
        terminalreporter.write_line(
            "FAILED: skips are not allowed (each one could hide a failure):")
        for line in _BAD_SKIPS:
            terminalreporter.write_line("  " + line)


def wait_for(cond, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError("condition not met within %.0fs" % timeout)
        time.sleep(0.05)
