"""symsched's Python API runs in PyNative mode only; this module detects the other modes (graph
code uses the ops of :mod:`symsched.mindspore.graph` instead).

Measured on MindSpore 2.10 CPU, with a function that writes a tensor's memory from Python:

* ``GRAPH_MODE`` / ``@ms.jit`` (``capture_mode='ast'``, the default): the compiler parses the
  function instead of running it. Python it cannot compile becomes a ``PyExecute`` node whose
  gradient is silently cut (zero, with only a log warning), and code it drops never runs.
  :func:`forbid_in_graph` registers symsched's entry points with MindSpore's
  ``jit_forbidden_register``, so compiling a graph that calls them fails at compile time with
  MindSpore's own error naming the symsched function.
* ``@ms.jit(capture_mode='trace')``: Python runs once while tracing, later calls replay the
  graph without it (a collective would silently return the first call's result);
  ``jit_context()`` is set while tracing.
* ``@ms.jit(capture_mode='bytecode')``: graph breaks run Python every call (values are right)
  but gradients through it are zero; its wrapper frame is on the Python stack.

:func:`check` raises :class:`GraphModeError` for the first two cheaply (an attribute read and a
call, about 0.2 µs); :func:`check_differentiable` adds the bytecode case (a walk of the Python
stack), used where gradients are recorded.
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Optional

import mindspore as ms

from .errors import GraphModeError

try:  # the process-wide context object: ``get_mode`` is a plain read of its ``_mode``
    from mindspore import context as _context_mod

    _ctx: Any = _context_mod._context()  # noqa: SLF001 - ms.get_context('mode') costs ~50 µs a call
except Exception:  # pragma: no cover - a MindSpore without the private singleton
    _ctx = None

try:
    from mindspore.common.jit_context import jit_context as _jit_context
except ImportError:  # pragma: no cover - older MindSpore
    def _jit_context() -> Any:
        return None

_GRAPH = ms.GRAPH_MODE


def _pijit_code() -> Optional[Any]:
    """The code object of the bytecode-capture wrapper (``PIJitCaptureContext._wrapper._fn``)."""
    try:
        from mindspore.graph._utils.pijit_context import PIJitCaptureContext
    except ImportError:  # pragma: no cover - a build without PIJit
        return None
    for c in PIJitCaptureContext._wrapper.__code__.co_consts:  # noqa: SLF001
        if getattr(c, "co_name", None) == "_fn":
            return c
    return None


_PIJIT_FN = _pijit_code()

#: How many graph-mode kernels (:mod:`symsched.mindspore.graph`) are running right now. A kernel
#: runs inside a compiled graph (the mode reads GRAPH_MODE) on a MindSpore worker thread, and
#: hands the core numpy arrays, not tensors: the adapter accepts those only while this is non-zero,
#: and the PyNative guard does not apply to them.
kernels = [0]
_MAX_FRAMES = 256


def _mode() -> int:
    if _ctx is not None:
        return _ctx._mode  # noqa: SLF001
    return ms.get_context("mode")  # pragma: no cover


def why_not_pynative(deep: bool = False) -> Optional[str]:
    """None in PyNative mode outside any ``ms.jit``, else which mode this is."""
    if _mode() == _GRAPH:
        return "mindspore.set_context(mode=GRAPH_MODE) is in force"
    if _jit_context() is not None:
        return "this call is inside @mindspore.jit(capture_mode='trace')"
    if deep and _PIJIT_FN is not None:
        f = sys._getframe(1)
        n = 0
        while f is not None and n < _MAX_FRAMES:
            if f.f_code is _PIJIT_FN:
                return "this call is inside @mindspore.jit(capture_mode='bytecode')"
            f = f.f_back
            n += 1
    return None


def _raise(op: str, why: str) -> None:
    raise GraphModeError(
        f"symsched {op}: {why}. symsched's Python API runs only in PyNative mode: under graph mode or ms.jit "
        f"MindSpore silently zeroes the gradients through it (and a traced graph replays a stale result). Inside "
        f"GRAPH_MODE or @mindspore.jit use the graph-mode ops of symsched.mindspore.graph (AllReduce, "
        f"AllGather ...); elsewhere call it in mindspore.PYNATIVE_MODE outside ms.jit")


def check(op: str) -> None:
    """Raise :class:`GraphModeError` under ``GRAPH_MODE`` or while ``ms.jit`` traces (not inside a
    graph-mode kernel of :mod:`symsched.mindspore.graph`, which is how graphs run collectives)."""
    if _ctx is not None and _ctx._mode != _GRAPH and _jit_context() is None:  # noqa: SLF001
        return
    if kernels[0]:
        return
    why = why_not_pynative()
    if why is not None:
        _raise(op, why)


def check_differentiable(op: str) -> None:
    """:func:`check`, and also inside ``ms.jit(capture_mode='bytecode')`` (gradients zeroed)."""
    why = why_not_pynative(deep=True)
    if why is not None:
        _raise(op, why)


def forbid_in_graph(fn: Callable) -> Callable:
    """Register ``fn`` so that MindSpore's graph compiler refuses it (and return it)."""
    try:
        from mindspore.common.api import jit_forbidden_register
    except ImportError:  # pragma: no cover
        return fn
    jit_forbidden_register(fn)
    return fn
