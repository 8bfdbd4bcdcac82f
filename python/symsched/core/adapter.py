"""The interface between symsched's framework-neutral core and a tensor framework.

The core (``symsched.core``) holds everything that is the same for every framework: argument
validation, schedule choice, the prepared-launch cache and its fast path, the call protocol,
the autograd *rules* (what each backward launches), the symmetric-heap bookkeeping, the
interop rule, the knob table and the trace writer. A :class:`FrameworkAdapter` holds only what
differs per framework: how a tensor becomes a heap span and back, how a group object names its
ranks, how the job is discovered, how a rule is registered with the framework's autograd, the
profiler's ranges and the framework's own collectives. One module implements it per framework.

**One framework per process.** A process serves one framework: importing its symsched flavour
installs its adapter (:func:`install`), and the whole core — the runtime, the heap, the group
cache — serves that framework's tensors. A second, different adapter is refused (the symmetric
heap and the groups are the process's own, so two frameworks could not share them safely).

**How a user selects the framework.** ``import symsched as symm`` is PyTorch (today's API,
unchanged). MindSpore will be ``import symsched.mindspore as symm``: a package next to
``symsched.torch`` whose ``__init__`` installs a ``MindSporeAdapter`` (this interface, one module
``symsched/mindspore/adapter.py``) and re-exports the same core API (``empty``,
``shmem_allreduce``, ``functional`` …, the names ``symsched.torch.API`` lists), so both frameworks
expose the same names and signatures by construction; groups are then MindSpore group-name
strings (:meth:`FrameworkAdapter.group_ranks`). No detection: the flavour a program uses is
explicit in its first line, and importing one never imports the other framework — the
top-level ``symsched`` package loads its PyTorch flavour only on the first use of one of its
names (``symm.init`` …, PEP 562), so ``import symsched.mindspore`` runs in a venv without torch
(MindSpore's wheel wants ``numpy<2``, which a torch venv may not have). A MindSpore adapter
sets ``native_alltoall_hit = native_tensor_hits = None`` (the native calls read torch tensors) and registers rules
with ``mindspore._Function`` or an ``nn.Cell`` with ``bprop``; the rest of the core is shared.

**Hot paths.** Every Python frame on a cached 8-byte call costs about as much as the native
launch itself, so three kinds of member are read once, when the adapter is installed, and
called straight from the core's fast paths: :meth:`plain`, :attr:`grad_enabled` and
:attr:`profiler_enabled` (a C function where the framework has one). For the same reason the core
reads two attributes of :attr:`tensor_type` instances directly on its hottest paths: ``dtype``
(the framework's dtype object) and ``requires_grad``; a framework whose tensors lack them wraps
nothing — it reports them through these names.

The rule a user sees in every message stays framework-neutral: arguments are named as the API
names them, dtypes by their labels (:mod:`symsched.core.dtypes`).
"""

from __future__ import annotations

import abc
import contextlib
from typing import Any, Callable, ContextManager, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from .errors import SymschedError, UnavailableError


class Span(NamedTuple):
    """A host tensor as the runtime sees it (what the full, validating path works with)."""

    #: address of the first element in this process
    ptr: int
    #: ``numel * itemsize``
    nbytes: int
    numel: int
    #: bytes per element
    itemsize: int
    #: the framework's dtype object (cache keys, messages)
    dtype: Any
    #: the runtime's name of the dtype (:mod:`symsched.core.dtypes`), None when symsched has none
    name: Optional[str]
    shape: Tuple[int, ...]
    #: whether the elements are dense and in row-major order (the range ``[ptr, ptr + nbytes)``)
    contiguous: bool


class FrameworkAdapter(abc.ABC):
    """What symsched needs from a tensor framework (see the module docstring).

    Attributes every adapter sets (class or instance attributes):

    * ``name`` — the framework's short name: ``"torch"``, ``"mindspore"`` (also the value of
      ``SYMSCHED_MATMUL_ENGINE`` that selects the framework's own matmul);
    * ``collectives_label`` — how messages name the framework's own collective library
      (``"gloo"``, ``"mccl"``) in a forbidden-mix error;
    * ``job_hint`` — what :func:`symsched.availability` says when no distributed job runs;
    * ``tensor_type`` — the framework's tensor class (instances expose ``dtype`` and
      ``requires_grad``, read directly on hot paths);
    * ``dtype_type`` — the class of the framework's dtype objects;
    * ``dtype_names`` — every framework dtype symsched supports, to the runtime's name
      (``{torch.float32: "f32", …, torch.float8_e4m3fn: "f8e4m3"}``);
    * ``default_dtype`` — the dtype ``empty`` allocates when none is given (float32);
    * ``grad_enabled`` — zero-argument callable: whether autograd records now;
    * ``profiler_enabled`` — zero-argument callable: whether the framework's profiler records
      (a cheap check: it is called on every cached call);
    * ``native_alltoall_hit`` — the native cached-alltoall call for this framework's tensors
      (``symsched._native.alltoall_hit`` reads torch tensors), or None;
    * ``native_tensor_hits`` — the class of native cached launches of the all-reduce,
      all-gather and reduce-scatter for this framework's tensors
      (``symsched._native.TensorHits`` reads torch tensors), or None.
    """

    name: str
    collectives_label: str
    job_hint: str
    tensor_type: type
    dtype_type: type
    dtype_names: Mapping[Any, str]
    default_dtype: Any
    grad_enabled: Callable[[], bool]
    profiler_enabled: Callable[[], bool]
    native_alltoall_hit: Optional[Callable[..., bool]] = None
    native_tensor_hits: Optional[Callable[[], Any]] = None

    # ----------------------------------------------------------- tensors <-> heap spans

    @abc.abstractmethod
    def plain(self, t: Any) -> Optional[Tuple[Any, int, int]]:
        """Hot path: ``(dtype, numel, address)`` when ``t`` is a tensor the runtime can use as it
        is (host memory, strided, contiguous), else None (the full path then explains why).
        Called on every cached call: read as few attributes as the framework allows."""

    @abc.abstractmethod
    def span(self, t: Any, arg: str) -> Span:
        """The :class:`Span` of a host tensor, or a typed error naming ``arg``:
        :class:`~symsched.SymschedTypeError` for a non-tensor, :class:`~symsched.SymschedArgumentError`
        for a tensor the host cannot address (another device, sparse, quantized …)."""

    @abc.abstractmethod
    def scan_list(self, tensors: Sequence[Any], dtype: Any, itemsize: int,
                  live: Optional[Callable[[int, int], bool]]) -> Optional[Tuple[List[int], Optional[Tuple[int, int]]]]:
        """Hot path of an alltoall's send list: None when a member is not a strided host tensor of
        ``dtype`` or (``live`` given) ``live(address, nbytes)`` is false for it; else
        ``(element counts, span)`` with ``span`` = ``(address, nbytes)`` of the whole list when
        its members are contiguous and lie back to back in order (bound without a copy)."""

    @abc.abstractmethod
    def packed(self, tensors: Sequence[Any]) -> Optional[Any]:
        """The flat tensor ``tensors`` already are (consecutive contiguous views of one
        allocation, in order), viewing the same memory; None when they are not."""

    @abc.abstractmethod
    def concat(self, tensors: Sequence[Any]) -> Any:
        """A new flat contiguous tensor of every member's elements in order."""

    @abc.abstractmethod
    def shape(self, t: Any) -> Tuple[int, ...]:
        """``t``'s shape as a tuple (MC2 cache keys: validation relates shapes)."""

    @abc.abstractmethod
    def describe(self, t: Any) -> str:
        """A short description for messages: ``'strided cpu torch.float32 tensor of 12 elements'``,
        or the type name of a non-tensor."""

    @abc.abstractmethod
    def as_int(self, v: Any) -> Any:
        """A one-element integer tensor as a Python int; anything else unchanged."""

    @abc.abstractmethod
    def as_list(self, v: Any) -> Any:
        """A 1-d tensor as a list of Python numbers; anything else unchanged."""

    # ------------------------------------------------------- the symmetric heap as tensors

    @abc.abstractmethod
    def from_heap(self, block: Any, nbytes: int, dtype: Any, shape: Tuple[int, ...]) -> Tuple[Any, int]:
        """A tensor of ``shape`` and ``dtype`` over the first ``nbytes`` of ``block`` (a
        ``symsched._native.HeapBlock``, a writable buffer), zero-copy, keeping ``block`` alive;
        and the block's address in this process."""

    @abc.abstractmethod
    def storage_address(self, t: Any) -> int:
        """Address of the first byte of the allocation ``t`` views (``symm.free`` takes a tensor
        by the allocation it came from, whatever view of it is passed)."""

    @abc.abstractmethod
    def release(self, t: Any) -> None:
        """After ``symm.free``: make ``t`` refer to no heap memory (an empty tensor)."""

    @abc.abstractmethod
    def itemsize(self, dtype: Any) -> int:
        """Bytes per element of a framework dtype."""

    @abc.abstractmethod
    def interop_key(self, t: Any) -> Optional[Tuple[int, Any]]:
        """The interop rule's unit for ``t``: ``(address of its whole allocation, an object that
        keeps the allocation alive)``, or None for an empty tensor or a non-tensor."""

    # -------------------------------------- tensor arithmetic the autograd rules and in-place forms use
    # The rules own the tensors they pass to the ``…_`` methods, which may update them in place
    # or return a new tensor: callers always use the result.

    @abc.abstractmethod
    def empty(self, shape: Tuple[int, ...], dtype: Any) -> Any:
        """A new uninitialised contiguous host tensor."""

    @abc.abstractmethod
    def zeros(self, shape: Tuple[int, ...], dtype: Any) -> Any:
        """A new zero-filled contiguous host tensor."""

    @abc.abstractmethod
    def contiguous(self, t: Any) -> Any:
        """``t`` when contiguous, else a contiguous copy (autograd sees the copy)."""

    @abc.abstractmethod
    def detached_copy(self, t: Any) -> Any:
        """A new contiguous tensor with ``t``'s values, outside autograd."""

    @abc.abstractmethod
    def detached(self, t: Any) -> Any:
        """``t`` outside autograd, sharing its memory."""

    @abc.abstractmethod
    def alias(self, t: Any) -> Any:
        """A new tensor object viewing ``t``'s memory with its shape (an identity forward's
        output must not be the input object itself)."""

    @abc.abstractmethod
    def reshape(self, t: Any, shape: Tuple[int, ...]) -> Any:
        """A view of contiguous ``t`` with another shape (``(-1,)`` flattens)."""

    @abc.abstractmethod
    def split(self, t: Any, sizes: Sequence[int]) -> List[Any]:
        """Consecutive views of a flat tensor with ``sizes`` elements each."""

    @abc.abstractmethod
    def copy_into(self, dst: Any, src: Any) -> None:
        """Write ``src``'s elements into ``dst`` in place, in order (same element count; ``dst``
        keeps its shape)."""

    @abc.abstractmethod
    def div_(self, t: Any, divisor: int) -> Any:
        """``t / divisor`` (may be in place)."""

    @abc.abstractmethod
    def div(self, t: Any, divisor: int) -> Any:
        """``t / divisor`` as a new tensor (``t`` is read only)."""

    @abc.abstractmethod
    def mul_(self, t: Any, mask: Any) -> Any:
        """``t * mask`` (may be in place)."""

    @abc.abstractmethod
    def mul(self, t: Any, mask: Any) -> Any:
        """``t * mask`` as a new tensor."""

    @abc.abstractmethod
    def add_(self, t: Any, other: Any) -> Any:
        """``t + other`` (may be in place)."""

    @abc.abstractmethod
    def zero_(self, t: Any) -> Any:
        """``t`` filled with zeros (may be in place)."""

    @abc.abstractmethod
    def matmul(self, a: Any, b: Any) -> Any:
        """``a @ b`` as a new tensor."""

    @abc.abstractmethod
    def transpose(self, t: Any) -> Any:
        """The transpose of a matrix (a view where the framework has them)."""

    @abc.abstractmethod
    def winners(self, x: Any, y: Any, rank: int, others: int) -> Any:
        """A new flat int32 tensor: ``rank`` where ``x == y`` element-wise, ``others`` elsewhere
        (max/min backward: whose element won)."""

    @abc.abstractmethod
    def mask(self, winners: Any, rank: int, shape: Tuple[int, ...]) -> Any:
        """A new boolean tensor of ``shape``: ``winners == rank``."""

    # ------------------------------------------------------------------------ autograd

    @abc.abstractmethod
    def differentiable(self, rule: type) -> Callable[..., Any]:
        """Register ``rule`` (a class with static ``forward(ctx, *args)`` and
        ``backward(ctx, *grads)``, :mod:`symsched.core.rules`) with the framework's autograd and
        return the callable that applies it (``torch.autograd.Function.apply``; for MindSpore
        ``mindspore._Function`` or an ``nn.Cell`` with ``bprop``). ``ctx`` must take arbitrary
        attributes."""

    @abc.abstractmethod
    def save(self, ctx: Any, *tensors: Any) -> None:
        """Keep tensors for backward (``ctx.save_for_backward``)."""

    @abc.abstractmethod
    def saved(self, ctx: Any) -> Tuple[Any, ...]:
        """The tensors :meth:`save` kept."""

    @abc.abstractmethod
    def needs_input_grad(self, ctx: Any, index: int) -> bool:
        """Whether forward input ``index`` needs a gradient."""

    @abc.abstractmethod
    def requires_grad(self, t: Any) -> bool:
        """Whether autograd records ``t`` (False for non-tensors)."""

    @abc.abstractmethod
    def anchor(self, dtype: Any, requires_grad: bool) -> Any:
        """An empty tensor of ``dtype`` that autograd tracks when ``requires_grad`` and the dtype
        is a float (``functional.recv``'s input, so its backward runs)."""

    # ---------------------------------------------------------------- groups and the job

    @abc.abstractmethod
    def group_ranks(self, group: Any, arg: str) -> Tuple[int, ...]:
        """The global ranks of a framework group object in group-rank order, or a typed error
        naming ``arg``. Never called with None (WORLD) or a rank list: the core handles those."""

    @abc.abstractmethod
    def is_world(self, group: Any) -> bool:
        """Whether ``group`` is the framework's object for the whole job."""

    @abc.abstractmethod
    def job(self) -> Optional[Tuple[int, int]]:
        """``(rank, world size)`` of the framework's distributed job, or None when it runs none
        (symsched then starts from the launcher variables)."""

    @abc.abstractmethod
    def share_from_rank0(self, key: str, value: Optional[str]) -> str:
        """Rank 0 passes ``value``, every rank gets it back, through the job's store (collective
        over the job; used once, to agree the job id)."""

    # ------------------------------------------------------------------------ profiling

    @abc.abstractmethod
    def profile_range(self, name: str) -> ContextManager[Any]:
        """A named range in the framework's profiler (entered only while it records)."""

    # -------------------------------------------------------- the framework's collectives

    @abc.abstractmethod
    def watch_collectives(self, note: Callable[[Any, str], None]) -> Callable[[], None]:
        """Until the returned function is called, pass every tensor that a call of the
        framework's own collective functions receives to ``note(tensor, op)`` before the
        collective runs (``note`` raises on a forbidden mix: nothing is sent then)."""

    @abc.abstractmethod
    def matmul_engine(self) -> Tuple[Callable[..., None], Optional[str]]:
        """The MC2 matmul engine on the framework's own kernel: the callback the executor calls
        per matmul step (``symsched._native.set_matmul_engine``) and the path of a loaded library
        whose ``sgemm_``/``dgemm_`` the executor may call directly (None: every step through the
        callback; ``SYMSCHED_MATMUL_BLAS=0`` asks for None)."""

    _host_engine: Any = None

    @classmethod
    def host_engine(cls) -> Any:
        """The framework's collective library for groups that span nodes: a
        :class:`symsched.core.nodes.HostEngine` (the inter-node step of the hierarchical
        schedules), made once per process by :meth:`make_host_engine`."""
        if cls._host_engine is None:
            cls._host_engine = cls.make_host_engine()
        return cls._host_engine

    @classmethod
    def make_host_engine(cls) -> Any:
        """A new host engine (see :meth:`host_engine`). A framework without one cannot serve
        groups across nodes."""
        raise UnavailableError(f"symsched for {cls.name} has no host-collective engine: groups across nodes "
                               f"are not available")


class _Unbound:
    """The adapter slot before any framework flavour was imported."""

    def __getattr__(self, name: str) -> Any:
        raise UnavailableError(
            "no framework is bound to symsched's core: import the flavour of your framework first "
            "(`import symsched` for PyTorch)")


_active: Any = _Unbound()
_bound = False
_listeners: List[Callable[[FrameworkAdapter], None]] = []


def install(adapter: FrameworkAdapter) -> None:
    """Bind ``adapter`` to the core for this process (see the module docstring)."""
    global _active, _bound
    if _bound:
        if type(_active) is type(adapter):
            return
        raise SymschedError(
            f"symsched already serves {_active.name} in this process; one framework per process "
            f"(cannot also install the {adapter.name} adapter)")
    _active, _bound = adapter, True
    for listener in _listeners:
        listener(adapter)


def on_install(listener: Callable[[FrameworkAdapter], None]) -> Callable[[FrameworkAdapter], None]:
    """Decorator: call ``listener(adapter)`` when the adapter is installed (at once if it is).
    Core modules bind the adapter members their hot paths call to module globals this way."""
    _listeners.append(listener)
    if _bound:
        listener(_active)
    return listener


def active() -> FrameworkAdapter:
    """The installed adapter (an :class:`UnavailableError` on use when none is)."""
    return _active


def is_bound() -> bool:
    """Whether a framework's adapter is installed in this process."""
    return _bound


def null_range(name: str) -> ContextManager[Any]:
    """A profile range for frameworks whose profiler records no user ranges."""
    return contextlib.nullcontext()
