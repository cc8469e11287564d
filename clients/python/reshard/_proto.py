"""The generated protobuf modules, imported once with a helpful error."""

import importlib.util
import os
from types import ModuleType
from typing import Optional

try:
    from .v1 import planner_pb2 as pb  # noqa: F401  (re-exported)
except ImportError as exc:  # pragma: no cover - an uninstalled checkout
    raise ImportError(
        "reshard.v1.planner_pb2 is generated when the package is built: "
        "install it with `pip install clients/python` (or run `python3 "
        "setup.py generate_proto` in clients/python for a source checkout)"
    ) from exc

_HEALTH: Optional[ModuleType] = None


def health_pb2() -> ModuleType:
    """grpc.health.v1 messages, generated into reshard/_health/ at build
    time. They are loaded from their file: the module path grpc.health.v1
    belongs to grpcio's own package."""
    global _HEALTH
    if _HEALTH is None:
        path = os.path.join(os.path.dirname(__file__), "_health", "grpc",
                            "health", "v1", "health_pb2.py")
        if not os.path.isfile(path):
            raise ImportError("the health messages were not generated: "
                              "grpc-proto was not installed when the "
                              "package was built")
        spec = importlib.util.spec_from_file_location(
            "reshard._health_pb2", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _HEALTH = module
    return _HEALTH
