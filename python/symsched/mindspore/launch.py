"""Which rank this process is, and how the host runtime finds its peers, on the MindSpore side.

Two launchers are understood:

* ``msrun`` (and MindSpore's dynamic-cluster env): ``RANK_ID``, ``RANK_SIZE`` (or
  ``MS_WORKER_NUM``), ``MS_NODE_ID``, ``MS_SCHED_HOST``/``MS_SCHED_PORT``, ``MS_ROLE=MS_WORKER``;
* ``symsched launch`` (torchrun's variables): ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
  ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``, plus ``SYMSCHED_RENDEZVOUS_DIR`` and
  ``SYMSCHED_JOB_ID``.

The host runtime bootstraps through its own rendezvous directory and memfd segments — no fork,
no MindSpore op — so it is safe after MindSpore has run ops (forking then deadlocks MindSpore).
:func:`discover` is a pure function of the environment (so it is unit-tested on dicts); the
caller turns its result into the runtime's variables with :func:`runtime_env`.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from typing import Mapping, Optional

from .errors import SymschedArgumentError, UnavailableError

#: The launcher names :func:`discover` reports.
MSRUN, SYMSCHED, NONE = "msrun", "symsched launch", "none"


@dataclass(frozen=True)
class LaunchInfo:
    """This process's place in the job, as the launcher described it."""

    launcher: str
    rank: int
    world: int
    local_rank: Optional[int]
    local_world: Optional[int]
    #: the port that names the job's rendezvous directory when none is given
    port: Optional[str]
    #: the job id, when the launcher gave one
    job_id: Optional[str]


def _int(env: Mapping[str, str], var: str, minimum: int) -> int:
    raw = env[var]
    try:
        value = int(raw.strip())
    except ValueError:
        raise SymschedArgumentError(f"environment variable {var}={raw!r} is not an integer") from None
    if value < minimum:
        raise SymschedArgumentError(f"environment variable {var}={raw!r} must be ≥ {minimum}")
    return value


def _opt_int(env: Mapping[str, str], var: str, minimum: int) -> Optional[int]:
    return _int(env, var, minimum) if env.get(var, "").strip() else None


def discover(env: Mapping[str, str]) -> LaunchInfo:
    """The launch described by ``env``: typed errors for garbage or contradicting values."""
    ms_rank = env.get("RANK_ID", "").strip()
    t_rank = env.get("RANK", "").strip()
    if ms_rank and env.get("MS_ROLE", "MS_WORKER") not in ("MS_WORKER", ""):
        raise UnavailableError(
            f"this process has MS_ROLE={env.get('MS_ROLE')!r}: only MindSpore workers (MS_WORKER) take part "
            f"in symsched")
    if ms_rank:
        rank = _int(env, "RANK_ID", 0)
        size_var = "RANK_SIZE" if env.get("RANK_SIZE", "").strip() else "MS_WORKER_NUM"
        if not env.get(size_var, "").strip():
            raise SymschedArgumentError("RANK_ID is set but neither RANK_SIZE nor MS_WORKER_NUM is")
        world = _int(env, size_var, 1)
        if t_rank and _int(env, "RANK", 0) != rank:
            raise SymschedArgumentError(
                f"RANK={env['RANK']!r} contradicts MindSpore's RANK_ID={env['RANK_ID']!r}: unset one of them")
        if rank >= world:
            raise SymschedArgumentError(f"RANK_ID={rank} is outside the job of {size_var}={world} ranks")
        port = env.get("MS_SCHED_PORT", "").strip() or None
        if port is not None and not port.isdigit():
            raise SymschedArgumentError(f"environment variable MS_SCHED_PORT={port!r} is not a port number")
        return LaunchInfo(MSRUN, rank, world, _opt_int(env, "LOCAL_RANK", 0), _opt_int(env, "LOCAL_WORLD_SIZE", 1),
                          port, env.get("SYMSCHED_JOB_ID") or None)
    if t_rank:
        rank = _int(env, "RANK", 0)
        if not env.get("WORLD_SIZE", "").strip():
            raise SymschedArgumentError("RANK is set but WORLD_SIZE is not")
        world = _int(env, "WORLD_SIZE", 1)
        if rank >= world:
            raise SymschedArgumentError(f"RANK={rank} is outside the job of WORLD_SIZE={world} ranks")
        return LaunchInfo(SYMSCHED, rank, world, _opt_int(env, "LOCAL_RANK", 0), _opt_int(env, "LOCAL_WORLD_SIZE", 1),
                          env.get("MASTER_PORT", "").strip() or None, env.get("SYMSCHED_JOB_ID") or None)
    return LaunchInfo(NONE, 0, 1, None, None, None, None)


def unavailable_reason(env: Mapping[str, str]) -> Optional[str]:
    """Why no job is visible from ``env`` (None when a launcher's variables are present)."""
    if env.get("RANK_ID", "").strip() or env.get("RANK", "").strip():
        return None
    return ("no distributed job: start the ranks with msrun (RANK_ID/RANK_SIZE) or `symsched launch` "
            "(RANK/WORLD_SIZE) before using symsched")


def agree_job_id(info: LaunchInfo) -> str:
    """A job id every rank of this job computes alike, different for jobs that reuse a port.

    Given by the launcher (``SYMSCHED_JOB_ID``) when set. Under msrun with MindSpore's
    communication initialised, rank 0 draws one and broadcasts it over mccl (collective over
    WORLD, once). Otherwise it is derived from the scheduler port and the parent process id
    (msrun's, shared by its workers), so a later job on the same port does not meet a stale
    directory of an earlier one."""
    if info.job_id:
        return info.job_id
    from .groups import mccl_initialized

    if info.launcher == MSRUN and mccl_initialized() and info.world > 1:
        from . import mccl

        return f"ms-{mccl.broadcast_int(secrets.randbits(62) if info.rank == 0 else 0, 0):016x}"
    return f"ms-{info.port or 'noport'}-{os.getppid()}"


def runtime_env(info: LaunchInfo, job_id: str, local_rank: Optional[int] = None,
                local_world: Optional[int] = None) -> dict:
    """The torchrun-style variables the native runtime reads (``Runtime.from_env``)."""
    lr = info.local_rank if info.local_rank is not None else local_rank
    lw = info.local_world if info.local_world is not None else local_world
    out = {"RANK": str(info.rank), "WORLD_SIZE": str(info.world), "SYMSCHED_JOB_ID": job_id}
    if lr is not None and lw is not None:
        out.update({"LOCAL_RANK": str(lr), "LOCAL_WORLD_SIZE": str(lw)})
    out["MASTER_PORT"] = info.port or "0"
    return out


def init_mccl(timeout_s: float = 120.0, env: Optional[Mapping[str, str]] = None) -> None:
    """Initialise MindSpore's mccl for ranks started by ``symsched launch`` (no msrun, no
    scheduler process): a ``TCPStore`` on ``MASTER_ADDR:MASTER_PORT`` hosted by rank 0.

    Uses ``mindspore.communication.management._init_with_store``, MindSpore's store-based
    initialisation (private in 2.10; its public wrapper ``mint.distributed.init_process_group``
    accepts only backend "hccl", which CPU refuses). Rank 0 hosts the store: it must not exit
    before the others are done with it — ``symsched.mindspore.finalize`` (a barrier) sees to
    that. Idempotent."""
    from .groups import mccl_initialized

    if mccl_initialized():
        return
    e = os.environ if env is None else env
    info = discover(e)
    if info.launcher != SYMSCHED:
        raise UnavailableError("init_mccl needs ranks started by `symsched launch` (RANK, WORLD_SIZE, MASTER_PORT); "
                               "under msrun call mindspore.communication.init() instead")
    if not info.port:
        raise SymschedArgumentError("init_mccl needs MASTER_PORT")
    from datetime import timedelta

    from mindspore.communication.management import _init_with_store
    from mindspore.mint.distributed import TCPStore

    addr = e.get("MASTER_ADDR", "127.0.0.1") or "127.0.0.1"
    store = TCPStore(host_name=addr, port=int(info.port), world_size=info.world, is_master=info.rank == 0,
                     timeout=timedelta(seconds=timeout_s))
    _init_with_store(backend="mccl", world_size=info.world, rank=info.rank, store=store,
                     timeout=timedelta(seconds=timeout_s))
