"""Exception types only the MindSpore side raises (the shared ones live in ``symsched.core.errors``;
re-exported here so the MindSpore modules import their errors from one place)."""

from __future__ import annotations

from ..core.errors import SymschedArgumentError, SymschedError, SymschedRuntimeError, SymschedTypeError, UnavailableError

__all__ = ["GraphModeError", "WrongFrameworkError", "SymschedArgumentError", "SymschedError", "SymschedRuntimeError",
           "SymschedTypeError", "UnavailableError"]


class GraphModeError(SymschedError, RuntimeError):
    """symsched was called under MindSpore graph mode (``GRAPH_MODE`` or inside ``ms.jit``).

    symsched ops run Python (and native code) outside MindSpore's graph compiler: in graph mode
    the compiler turns them into ``PyExecute`` nodes whose gradients are silently cut to zero,
    and a traced ``ms.jit`` replays the first call's result without running the op again. Use
    PyNative mode (the default): ``mindspore.set_context(mode=mindspore.PYNATIVE_MODE)``.
    """


class WrongFrameworkError(SymschedTypeError):
    """A tensor of another framework (a ``torch.Tensor``) was passed to the MindSpore API."""
