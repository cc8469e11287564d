"""What the UCX end-to-end tests (test_ucx_pd.py, test_ucx_load.py)
share: one daemon per class, a temporary directory per test, the class's
UCX transports in every program's environment, a serving process (the
prefill, the store) started until its peers file appears and stopped with
SIGTERM, and no sanitizer report in any program's stderr."""

import os
import signal
import subprocess
import tempfile
import time
import unittest

import reshard_e2e as e

SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer",
                     "runtime error:")


class UcxMixin:
    """One daemon per class; each test's programs run with the class's UCX
    transports (``UCX_ENV``). A test file's mixin names the programs it
    needs (``PROGRAMS``: the class is skipped with ``SKIP_REASON`` when one
    is not executable) and its temporary directories' prefix."""

    UCX_ENV = {}
    PROGRAMS = ()
    SKIP_REASON = ""
    TEMP_PREFIX = "reshard-ucx-"

    @classmethod
    def setUpClass(cls):
        if not all(os.access(p, os.X_OK) for p in cls.PROGRAMS):
            raise unittest.SkipTest(cls.SKIP_REASON)
        cls.daemon = e.Daemon().start()
        cls.planner = e.Planner(cls.daemon.channel())

    @classmethod
    def tearDownClass(cls):
        cls.daemon.stop()
        cls.daemon.check_sanitizers()

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory(prefix=self.TEMP_PREFIX)
        self.servers = []

    def tearDown(self):
        for proc in self.servers:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        self.dir.cleanup()

    def env(self):
        env = dict(os.environ)
        env.update(self.UCX_ENV)
        # Under the ASan build LeakSanitizer checks every process at exit
        # with no suppressions: UCX 1.13 frees what it allocates, also
        # after a dead peer's requests were abandoned to the worker.
        return env

    def path(self, name):
        return os.path.join(self.dir.name, name)

    def assert_no_sanitizer_report(self, err):
        for marker in SANITIZER_MARKERS:
            self.assertNotIn(marker, err)

    def start_server(self, what, argv, peers):
        """Starts ``argv`` (the ``what`` process, for messages) and waits
        until it has written its peers file ``peers``. Returns the process;
        tearDown kills it if it is still running."""
        proc = subprocess.Popen(argv, env=self.env(), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        self.servers.append(proc)
        deadline = time.monotonic() + 120
        while not os.path.exists(peers):
            if proc.poll() is not None:
                self.fail("%s exited %s: %s" % (what, proc.returncode,
                                                proc.stderr.read()))
            self.assertLess(time.monotonic(), deadline, "no peers file")
            time.sleep(0.05)
        return proc

    def stop_server(self, proc):
        """Stops ``proc`` with SIGTERM and checks it exited cleanly, without
        a sanitizer report. Returns its stdout."""
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        self.assertEqual(proc.returncode, 0, err)
        self.assert_no_sanitizer_report(err)
        return out
