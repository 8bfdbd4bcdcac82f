"""Custom backward on MindSpore: ``mindspore._Function`` (PyNative only).

``mindspore._Function`` is MindSpore's counterpart of ``torch.autograd.Function``:
``forward(ctx, *args)`` / ``backward(ctx, *grads)``, ``ctx`` attributes, ``save_for_backward``,
``needs_input_grad``, non-tensor arguments passed through, ``None`` gradients for them, and
missing output gradients materialised as zeros. It is private (the public ``nn.Cell.bprop``
needs a Cell per call); both give the same gradients with ``ms.grad``/``ms.value_and_grad``
(measured on 2.10 CPU). An in-place write after it, ``t.copy_(y)``, carries the gradient
through ``y``, which the in-place collectives rely on.
"""

from __future__ import annotations

from typing import Any

import mindspore as ms
from mindspore.common import api as _api

#: Base class of every differentiable symsched op on MindSpore.
Function: Any = ms._Function  # noqa: SLF001 - see the module docstring

_pe = _api._pynative_executor  # noqa: SLF001


def recording() -> bool:
    """Whether MindSpore is recording a graph for ``ms.grad`` right now (PyNative)."""
    return bool(_pe.grad_flag())


def recording_fn() -> Any:
    """:func:`recording` as the cheapest callable: the executor's bound ``grad_flag`` itself (the
    core calls it on every in-place collective; a Python wrapper doubled its cost)."""
    return _pe.grad_flag
