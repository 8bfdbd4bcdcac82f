"""The knob table: every environment variable the Python side of symsched reads, in one place.

Each :class:`Knob` names its variable, its default, the values it accepts, when it is read and
what it does; :func:`markdown` renders the table that ``python/README.md`` shows (a test keeps
the two equal: ``python -m symsched.core.knobs`` prints it). No other module reads the
environment: modules ask a knob for its value (:meth:`Knob.get`), which parses and validates the
raw text once per distinct value, so a garbage value is a :class:`SymschedConfigError` naming the
variable and what it accepts — at :func:`symsched.init` (:func:`check_all`), or at the first call
that reads a knob changed afterwards. Knobs read per call may be changed between calls.

The hot paths put a knob's raw text (:attr:`Knob.raw`) into their cache keys instead of its value:
``os.environ.get`` encodes the key and decodes the value on every call (over a microsecond on a
loaded host, several times per collective), while :attr:`Knob.raw` compares the stored bytes.

The variables the Rust runtime reads itself (heap size, signal timeout, logging, the executor's
A/B switches, the launcher's ``RANK``/``WORLD_SIZE``/…) are documented in the repository
README's table; the runtime validates those.
"""

from __future__ import annotations

import os
import re
from typing import Any, Callable, Dict, List, Optional, Tuple

from . import dtypes
from .errors import SymschedConfigError

_data: Optional[Dict[Any, Any]] = getattr(os.environ, "_data", None)
if not isinstance(_data, dict):  # pragma: no cover - not CPython's os._Environ
    _data = None

_UNSET = object()


def _raw_getter(name: str) -> Callable[[], Any]:
    """A zero-argument function returning ``name``'s raw stored value (None when unset); equal
    results mean an unchanged variable."""
    if _data is None:  # pragma: no cover - see above
        return lambda: os.environ.get(name)
    enc = getattr(os.environ, "encodekey", None)
    key = enc(name) if callable(enc) else name
    get = _data.get
    return lambda: get(key)


class Knob:
    """One environment variable: ``parse`` turns its (stripped, non-empty) text into the value or
    raises ``ValueError`` saying what is wrong; unset or empty means ``default``."""

    __slots__ = ("name", "default", "accepts", "when", "effect", "shown_default", "raw", "_parse", "_cache")

    def __init__(self, name: str, default: Any, parse: Callable[[str], Any], accepts: str, when: str,
                 effect: str, shown_default: Optional[str] = None) -> None:
        self.name = name
        self.default = default
        self._parse = parse
        self.accepts = accepts
        self.when = when
        self.effect = effect
        #: the raw stored value (None when unset), for cache keys on hot paths
        self.raw: Callable[[], Any] = _raw_getter(name)
        self._cache: Tuple[Any, Any] = (_UNSET, None)
        self.shown_default = shown_default if shown_default is not None else ("unset" if default is None
                                                                               else str(default))

    def get(self) -> Any:
        """The validated value (parsed once per distinct raw value)."""
        raw = self.raw()
        cached = self._cache
        if cached[0] is not _UNSET and cached[0] == raw:
            return cached[1]
        value = self.parse(raw)
        self._cache = (raw, value)
        return value

    def parse(self, raw: Any) -> Any:
        """The value ``raw`` (bytes or str as stored, or None) stands for, or a
        :class:`SymschedConfigError`."""
        text = raw.decode(errors="replace") if isinstance(raw, bytes) else raw
        if text is None or not text.strip():
            return self.default
        try:
            return self._parse(text.strip())
        except ValueError as exc:
            raise SymschedConfigError(
                f"{self.name}={text!r} is not valid: {exc} (accepted: {self.accepts}; "
                f"see the knob table in python/README.md)") from None

    def is_set(self) -> bool:
        return self.raw() is not None


# ------------------------------------------------------------------------------------ parsers

_BYTE_UNITS = {"": 1, "k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gib": 1 << 30}


def byte_count(text: str) -> int:
    """A non-negative whole number of bytes, optionally with a K/M/G (KiB/MiB/GiB) suffix."""
    m = re.fullmatch(r"(\d+)\s*([A-Za-z]*)", text)
    unit = _BYTE_UNITS.get(m.group(2).lower()) if m else None
    if m is None or unit is None:
        raise ValueError("not a non-negative byte count")
    return int(m.group(1)) * unit


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def flag(text: str) -> bool:
    key = text.lower()
    if key in _TRUE:
        return True
    if key in _FALSE:
        return False
    raise ValueError("not a switch")


def choice(*values: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        key = text.lower()
        if key not in values:
            raise ValueError("not one of the choices")
        return key
    return parse


def wire(text: str) -> Optional[str]:
    return dtypes.wire_from_text(text)


def writable_file(text: str) -> str:
    """A file path this process can create or append to (its directory exists and is writable)."""
    path = os.path.abspath(text)
    if os.path.isdir(path):
        raise ValueError("is a directory")
    parent = os.path.dirname(path)
    if not os.path.isdir(parent):
        raise ValueError(f"its directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"its directory {parent} is not writable")
    if os.path.exists(path) and not os.access(path, os.W_OK):
        raise ValueError("the file exists and is not writable")
    return text


def job_id(text: str) -> str:
    """Part of the rendezvous directory's name: no path separator, not '.' or '..'."""
    if len(text) > 128 or "/" in text or text in (".", "..") or not text.isprintable():
        raise ValueError("not a directory-name part (no '/', not '.' or '..', printable, at most 128 characters)")
    return text


def node_id(text: str) -> str:
    """The runtime's rule for a node id (``runtime/src/config.rs``)."""
    if len(text) > 255 or not text.isprintable() or any(c.isspace() for c in text):
        raise ValueError("not 1 to 255 printable characters without spaces")
    return text


def rank(text: str) -> int:
    if not re.fullmatch(r"\d+", text):
        raise ValueError("not a non-negative integer")
    return int(text)


# ------------------------------------------------------------------------------------ the table

PER_CALL = "every call (may change between calls)"

LOW_PRECISION_DTYPE = Knob(
    "SYMMETRIC_MEMORY_LOW_PRECISION_DTYPE", None, wire,
    "float16 (fp16, half), bfloat16 (bf16), float8_e4m3fn (fp8, e4m3), float8_e5m2 (e5m2), none",
    PER_CALL,
    "default wire format of allreduce / reduce_scatter (sum, avg on floats wider than the wire; "
    "a per-call `low_precision_dtype` overrides it)")

ALLREDUCE_ONE_SHOT_MAX_BYTES = Knob(
    "SYMSCHED_ALLREDUCE_ONE_SHOT_MAX_BYTES", 4 * 1024, byte_count, "bytes (K/M/G suffixes)", PER_CALL,
    "allreduce: one-shot below this many bytes, two-shot at or above (measured: "
    "`python/tests/bench_schedule_choice.py`)", shown_default="4K")

ALLREDUCE_PULL_MIN_BYTES = Knob(
    "SYMSCHED_ALLREDUCE_PULL_MIN_BYTES", 0, byte_count, "bytes (K/M/G suffixes)", PER_CALL,
    "allreduce two-shot: pull at or above this many bytes, push below (the pull form moves about "
    "16c bytes per rank against 24c, and its reduce-scatter half reads peers' chunks instead of "
    "having them written into a landing scratch, `docs/performance.md`)")

ALLREDUCE_ORDER = Knob(
    "SYMSCHED_ALLREDUCE_ORDER", "size", choice("size", "gloo"), "size, gloo", PER_CALL,
    "allreduce without a wire format: `size` picks the schedule by message size; `gloo` runs "
    "`allreduce_ring_gloo`, which cuts the buffer and folds every element as torch's gloo backend "
    "does (f32 results equal gloo's bit for bit; `python/README.md`, Bit-exact against gloo)")

ALLGATHER_PULL_MIN_BYTES = Knob(
    "SYMSCHED_ALLGATHER_PULL_MIN_BYTES", 0, byte_count, "bytes (K/M/G suffixes)", PER_CALL,
    "all-gather into a private output (and reduce_scatter's backward): pull at or above this many "
    "output bytes, push below; symmetric outputs and groups of one always push")

ALLGATHER_ONE_SHOT_MAX_BYTES = Knob(
    "SYMSCHED_ALLGATHER_ONE_SHOT_MAX_BYTES", 32 * 1024, byte_count, "bytes (K/M/G suffixes)", PER_CALL,
    "all-gather (and reduce_scatter's backward): the one-shot schedule below this many output bytes (one "
    "signal round, a landing copy), push or pull at or above", shown_default="32K")

REDUCE_SCATTER_PULL_MIN_BYTES = Knob(
    "SYMSCHED_REDUCE_SCATTER_PULL_MIN_BYTES", 8 * 1024, byte_count, "bytes (K/M/G suffixes)", PER_CALL,
    "reduce_scatter of a symmetric input without a wire format: `reduce_scatter_pull` (peers' blocks "
    "read where they are) at or above this many input bytes, `reduce_scatter_push` below (an ordinary "
    "input always pushes)", shown_default="8K")

MC2_AG_PULL = Knob(
    "SYMSCHED_MC2_AG_PULL", True, flag, "0/1 (false/true, no/yes, off/on)", PER_CALL,
    "fused_all_gather_matmul with a private `gather_out` runs `allgather_matmul_pull` (0: the push form)",
    shown_default="1")

MC2_RS_PULL = Knob(
    "SYMSCHED_MC2_RS_PULL", False, flag, "0/1 (false/true, no/yes, off/on)", PER_CALL,
    "fused_matmul_reduce_scatter runs `matmul_reduce_scatter_pull` (1) instead of the push form "
    "(slower in wall time on a loaded 2-core host, `docs/performance.md`)", shown_default="0")

MATMUL_ENGINE = Knob(
    "SYMSCHED_MATMUL_ENGINE", None, choice("builtin", "torch", "mindspore"), "builtin, torch, mindspore",
    "when the framework's flavour loads (applied when valid) and at init (validated)",
    "kernel of MC2 matmul steps: the framework's own matmul (the default: the running framework's "
    "name) or the executor's bit-exact reference kernel (`builtin`)", shown_default="the framework")

MATMUL_BLAS = Knob(
    "SYMSCHED_MATMUL_BLAS", True, flag, "0/1 (false/true, no/yes, off/on)", "when the engine is set",
    "with the framework engine, float32/float64 MC2 steps call the framework's own BLAS "
    "(torch: MKL `sgemm_`/`dgemm_`) without the GIL; 0 sends them through the framework's matmul",
    shown_default="1")

CHECK_BINDINGS = Knob(
    "SYMSCHED_CHECK_BINDINGS", "first", choice("first", "always"), "first, always",
    "when a launch is prepared",
    "no effect: every launch's binding pattern is agreed by every rank (docs/plan-schema.md, "
    "\"Launch agreement\"); still validated, so job scripts that set it keep working")

TRACE = Knob(
    "SYMSCHED_TRACE", None, writable_file, "a file path in a writable directory",
    "every call (on/off); validated at init",
    "Chrome/Perfetto trace of every rank's ops and executor steps, merged into this file at exit "
    "or `symm.flush_trace()` (the executor reads it too)")

JOB_ID = Knob(
    "SYMSCHED_JOB_ID", None, job_id, "up to 128 printable characters without '/' (not '.' or '..')", "at init",
    "the job's id in the rendezvous directory name; unset: agreed through the framework's store "
    "(set by init itself for the runtime)")

RANK = Knob(
    "RANK", None, rank, "a non-negative integer", "at init (outside a framework job)",
    "the launcher's rank variable: without a framework job (torch.distributed not initialised), "
    "a set `RANK` makes symsched start from the launcher variables (validated by the runtime)")

NODE_ID = Knob(
    "SYMSCHED_NODE_ID", None, node_id, "1 to 255 printable characters without spaces", "at init and group creation",
    "the node this rank is on (emulates nodes on one host; read by the runtime, whose ranks of one node share "
    "heaps): when set, or when the runtime started fewer ranks than the job has, groups learn their members' "
    "nodes and a group spanning nodes runs hierarchically (`docs/cross-node.md`)")

#: Every knob, in table order.
ALL: Tuple[Knob, ...] = (LOW_PRECISION_DTYPE, ALLREDUCE_ONE_SHOT_MAX_BYTES, ALLREDUCE_PULL_MIN_BYTES,
                         ALLREDUCE_ORDER, ALLGATHER_PULL_MIN_BYTES, ALLGATHER_ONE_SHOT_MAX_BYTES,
                         REDUCE_SCATTER_PULL_MIN_BYTES, MC2_AG_PULL, MC2_RS_PULL, MATMUL_ENGINE, MATMUL_BLAS,
                         CHECK_BINDINGS, TRACE, JOB_ID, RANK, NODE_ID)


def check_all() -> None:
    """Validate every knob's current value (at init): the first bad one raises, and the
    message lists every bad one, so a job fails once with the whole story."""
    bad: List[str] = []
    for knob in ALL:
        try:
            knob.get()
        except SymschedConfigError as exc:
            bad.append(str(exc))
    if bad:
        raise SymschedConfigError("; ".join(bad))


def markdown() -> str:
    """The knob table as Markdown (python/README.md shows exactly this)."""
    rows = ["| variable | default | accepted | read | effect |", "|---|---|---|---|---|"]
    for k in ALL:
        rows.append(f"| `{k.name}` | {k.shown_default} | {k.accepts} | {k.when} | {k.effect} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
