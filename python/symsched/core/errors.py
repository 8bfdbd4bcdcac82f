"""Exception types raised by symsched (framework-neutral).

Every error a user can cause by passing a bad argument is a ``ValueError`` or ``TypeError``
subclass, so ordinary ``except ValueError`` handling keeps working; runtime failures (timeouts,
dead peers, a runtime that cannot start) are ``SymschedRuntimeError``.
"""

from __future__ import annotations


class SymschedError(Exception):
    """Base class of every symsched error."""


class SymschedArgumentError(SymschedError, ValueError):
    """An argument has a bad value; the message names the argument and what was expected."""


class SymschedTypeError(SymschedError, TypeError):
    """An argument has the wrong type; the message names the argument and the expected type."""


class NotSymmetricError(SymschedArgumentError):
    """A tensor that must live in the symmetric heap (a ``symm.empty`` tensor) does not."""


class StaleTensorError(NotSymmetricError):
    """A tensor whose symmetric allocation was released with ``symm.free``."""


class UnavailableError(SymschedError, RuntimeError):
    """The symmetric-memory runtime cannot be used here; ``symm.availability()`` says why."""


class SymschedRuntimeError(SymschedError, RuntimeError):
    """A failure reported by the native runtime (timeout, dead peer, executor error)."""


class ForbiddenMixError(SymschedError, RuntimeError):
    """One gradient bucket (storage) was reduced partly by gloo and partly by symsched in one step.

    RFC §5.4 forbids mixing the framework's collectives and symmetric memory on the same data in
    the same communication stage: each library synchronises differently, so the result is
    inconsistent. See :mod:`symsched.interop`.
    """


class SymschedConfigError(SymschedArgumentError):
    """An environment variable (a knob) holds a value its entry in the knob table does not allow;
    the message names the variable, the value and what is accepted (``symsched.core.knobs``)."""


class AgreementError(SymschedRuntimeError, SymschedArgumentError):
    """The ranks of one collective call disagree on what they launch — element counts, dtype,
    reduce op, wire, or how a tensor is bound (symmetric at the same offset, or ordinary), or the
    size of one ``symm.empty``/``symm.free``. Raised alike on every rank, before anything was
    written; the message names each rank's values. The group stays usable.

    A ``SymschedRuntimeError`` and a ``ValueError``; also a ``SymschedArgumentError``, which is
    what such mismatches raised before (a disagreement is a bad argument on some rank)."""


class PeerAbortedError(SymschedRuntimeError):
    """A member of the group failed inside a collective (or a one-sided op met a group aborted
    that way): the message names the failing rank and its error; ``rank`` (its global rank),
    ``error`` (its error text) and ``group`` (the group's global ranks) carry them. The group's
    next collective call on every member resets it (``docs/reliability.md``)."""

    def __init__(self, message: str, *, rank: "int | None" = None, error: "str | None" = None,
                 group: "tuple | None" = None) -> None:
        super().__init__(message)
        self.rank = rank
        self.error = error
        self.group = group


class GroupNotSetUpError(SymschedRuntimeError):
    """A one-sided operation named a group this rank has not set up yet: groups are set up by
    their first collective call (every member takes part), never by a one-sided op."""
