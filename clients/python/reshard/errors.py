"""The package's exceptions."""

from typing import Optional

import grpc


class ReshardError(Exception):
    """A call to reshardd failed.

    ``code`` is the ``grpc.StatusCode`` (``code_name`` its name, e.g.
    ``"INVALID_ARGUMENT"``), ``message`` the daemon's message naming the
    field and the rule, ``method`` the RPC (``"PlanLoad"``). A response the
    client cannot use is reported as ``INTERNAL`` with a message starting
    with ``client:``.
    """

    def __init__(self, code: grpc.StatusCode, message: str,
                 method: Optional[str] = None) -> None:
        self.code = code
        self.message = message
        self.method = method
        where = method + ": " if method else ""
        super().__init__("%s%s: %s" % (where, code.name, message))

    @property
    def code_name(self) -> str:
        return str(self.code.name)


class BindingError(ValueError):
    """Tensors that do not describe a valid runtime binding (SPEC §1.5).
    Raised by the binding builder before anything is sent; the message
    names the tensor and the rule."""


class PoolError(BindingError):
    """Tensors or a block table that do not describe a valid memory pool
    (SPEC §1.5a). Raised by the pool builder and the plan calls before
    anything is sent; the message names the tensor (and layer) or the
    block table entry at fault."""
