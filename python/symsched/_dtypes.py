"""Mapping between torch dtypes and the runtime's dtype / wire-format names."""

from __future__ import annotations

from typing import Optional, Union

import torch

from .core import knobs
from .core.errors import SymschedArgumentError, SymschedTypeError

#: Data dtypes the collectives accept, with the runtime's names.
DATA_DTYPES = {
    torch.float32: "f32",
    torch.float64: "f64",
    torch.float16: "f16",
    torch.bfloat16: "bf16",
    torch.int32: "i32",
    torch.int64: "i64",
    torch.uint8: "u8",
}

#: Wire formats for low-precision transport.
WIRE_DTYPES = {
    torch.float16: "f16",
    torch.bfloat16: "bf16",
    torch.float8_e4m3fn: "f8e4m3",
    torch.float8_e5m2: "f8e5m2",
}

_WIRE_NAMES = {
    "float16": torch.float16, "fp16": torch.float16, "half": torch.float16, "f16": torch.float16,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float8_e4m3fn": torch.float8_e4m3fn, "fp8_e4m3": torch.float8_e4m3fn, "e4m3": torch.float8_e4m3fn,
    "f8e4m3": torch.float8_e4m3fn, "fp8": torch.float8_e4m3fn,
    "float8_e5m2": torch.float8_e5m2, "fp8_e5m2": torch.float8_e5m2, "e5m2": torch.float8_e5m2,
    "f8e5m2": torch.float8_e5m2,
}

_WIRE_BY_NAME = {name: d for d, name in WIRE_DTYPES.items()}

FLOAT_DATA = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def data_name(dtype: torch.dtype, arg: str) -> str:
    """The runtime name of a data dtype, or a clear error naming the argument."""
    try:
        return DATA_DTYPES[dtype]
    except KeyError:
        allowed = ", ".join(str(d).replace("torch.", "") for d in DATA_DTYPES)
        raise SymschedArgumentError(f"`{arg}` has dtype {dtype}; expected one of: {allowed}") from None


def parse_wire(value: Union[None, str, torch.dtype], arg: str = "low_precision_dtype") -> Optional[torch.dtype]:
    """Resolve a wire format given as a torch dtype or a name ('bf16', 'float8_e4m3fn', …)."""
    if value is None:
        return None
    if isinstance(value, torch.dtype):
        if value in WIRE_DTYPES:
            return value
        raise SymschedArgumentError(
            f"`{arg}` must be one of float16, bfloat16, float8_e4m3fn, float8_e5m2, got {value}")
    if isinstance(value, str):
        key = value.strip().lower().replace("torch.", "")
        if key in ("", "none", "off", "0"):
            return None
        if key in _WIRE_NAMES:
            return _WIRE_NAMES[key]
        raise SymschedArgumentError(
            f"`{arg}` must be one of float16, bfloat16, float8_e4m3fn, float8_e5m2, got {value!r}")
    raise SymschedTypeError(f"`{arg}` must be a torch dtype or a name, got {type(value).__name__}")


def default_wire() -> Optional[torch.dtype]:
    """The wire format from ``SYMMETRIC_MEMORY_LOW_PRECISION_DTYPE`` (None when unset)."""
    name = knobs.LOW_PRECISION_DTYPE.get()
    return None if name is None else _WIRE_BY_NAME[name]


def resolve_wire(explicit: Union[None, str, torch.dtype], data: torch.dtype, arg: str = "low_precision_dtype"
                 ) -> Optional[torch.dtype]:
    """Per-call override, else the env default; None when no narrowing applies.

    A wire format only applies to floating data wider than it; the env default is silently
    skipped for integer or already-narrow data (it is a job-wide default), while an explicit
    per-call value that cannot apply is an error.
    """
    wire = parse_wire(explicit, arg) if explicit is not None else default_wire()
    if wire is None:
        return None
    applicable = data in FLOAT_DATA and torch.finfo(wire).bits < torch.finfo(data).bits
    if not applicable:
        if explicit is not None:
            raise SymschedArgumentError(
                f"`{arg}`={wire} cannot carry {data} data: the wire format must be a float narrower "
                f"than the tensor's dtype")
        return None
    return wire
