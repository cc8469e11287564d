"""The environment of the end-to-end tests (reshard_e2e.py re-exports
all of it): the binaries and generated messages named by the variables
tests/e2e/CMakeLists.txt sets, the generated modules (``pb``,
``health_pb2``), the constants the checks rely on, and ``log``."""

import importlib.util
import os
import sys

try:
    import grpc  # noqa: F401 (checked here for every helper)
except ImportError as exc:  # pragma: no cover - environment problem
    raise ImportError(
        "grpcio is missing: run the tests with Debian's /usr/bin/python3 and "
        "the python3-grpcio and python3-protobuf packages "
        "(scripts/install-deps.sh)") from exc

DAEMON = os.environ.get("RESHARD_E2E_DAEMON", "")
PYGEN = os.environ.get("RESHARD_E2E_PYGEN", "")
RESHARDCTL = os.environ.get("RESHARD_E2E_RESHARDCTL", "")
VERBOSE = os.environ.get("RESHARD_E2E_VERBOSE", "") not in ("", "0")
SOURCE_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_DIR = os.path.dirname(os.path.dirname(SOURCE_DIR))


def _load_generated():
    if not PYGEN or not os.path.isdir(PYGEN):
        raise RuntimeError(
            "RESHARD_E2E_PYGEN must name the directory of the generated "
            "*_pb2.py modules (run the tests through ctest)")
    if PYGEN not in sys.path:
        sys.path.insert(0, PYGEN)
    from reshard.v1 import planner_pb2  # noqa: E402  (generated)

    # grpc/health/v1/health_pb2.py cannot be imported as grpc.health...:
    # "grpc" is grpcio's own package. Load it from its file instead.
    path = os.path.join(PYGEN, "grpc", "health", "v1", "health_pb2.py")
    spec = importlib.util.spec_from_file_location("reshard_e2e_health_pb2",
                                                  path)
    health = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(health)
    return planner_pb2, health


pb, health_pb2 = _load_generated()

KEY = pb.KEY
VALUE = pb.VALUE
FORMATS = {"PLHD": pb.PLHD, "LPHD": pb.LPHD, "HPLD": pb.HPLD}
FORMAT_NAMES = {v: k for k, v in FORMATS.items()}
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
PLANNER_SERVICE = "reshard.v1.Planner"

# Server defaults of SPEC §2.3 that the checks below rely on.
DEFAULT_MAX_BATCH_OPERATIONS = 4096
DEFAULT_MAX_BATCH_BYTES = 64 << 20


def log(*args):
    if VERBOSE:
        print(*args, file=sys.stderr, flush=True)
