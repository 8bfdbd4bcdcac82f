"""Cheap reads of environment variables on hot paths.

``os.environ.get`` encodes the key and decodes the value on every call (over a microsecond on
a loaded host, several times per collective). The per-call caches only need to notice that a
variable changed, so they compare the raw stored value instead; the slow paths still read and
parse the variable through ``os.environ`` (with its errors).
"""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, Optional

_data: Optional[Dict[Any, Any]] = getattr(os.environ, "_data", None)
if not isinstance(_data, dict):  # pragma: no cover - not CPython's os._Environ
    _data = None


def _encoder() -> Callable[[str], Any]:
    enc = getattr(os.environ, "encodekey", None)
    return enc if callable(enc) else (lambda k: k)


def raw_getter(name: str) -> Callable[[], Any]:
    """A zero-argument function returning ``name``'s raw stored value (None when unset); equal
    results mean an unchanged variable."""
    if _data is None:  # pragma: no cover - see above
        return lambda: os.environ.get(name)
    key = _encoder()(name)
    get = _data.get
    return lambda: get(key)
