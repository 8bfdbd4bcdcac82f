"""One rank of a harness run (started by symsched launch or msrun): optionally initialise
mccl, run the scenario, pickle its result, meet the other ranks, exit without teardown."""

from __future__ import annotations

import importlib
import os
import pickle
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main() -> None:
    module, func, tmp, comm = sys.argv[1:5]
    if os.environ.get("MS_ROLE") == "MS_SCHED":
        # msrun runs this script as its scheduler too: init() serves the cluster until it ends
        from mindspore.communication import init

        init()
        return
    from symsched.mindspore import launch

    info = launch.discover(os.environ)
    if comm == "mccl":
        if info.launcher == launch.MSRUN:
            from mindspore.communication import init

            init()
        else:
            launch.init_mccl()
    with open(os.path.join(tmp, "args.pkl"), "rb") as f:
        args = pickle.load(f)
    fn = getattr(importlib.import_module(module), func)
    result = fn(info.rank, info.world, args)
    finalize = getattr(sys.modules.get("symsched.mindspore"), "finalize", None)
    if finalize is not None and not (isinstance(result, dict) and result.get("desynced")):
        finalize()  # a barrier over the host runtime, then the rendezvous directory goes
    with open(os.path.join(tmp, f"result{info.rank}.pkl.part"), "wb") as f:
        pickle.dump(result, f)
    os.replace(os.path.join(tmp, f"result{info.rank}.pkl.part"), os.path.join(tmp, f"result{info.rank}.pkl"))
    if comm == "mccl" and info.rank == 0:
        # rank 0 hosts mccl's store (and answers its barriers): a peer still finishing its last
        # collective hangs if rank 0 is gone, so rank 0 leaves last (bounded by the harness)
        others = [os.path.join(tmp, f"result{r}.pkl") for r in range(1, info.world)]
        deadline = time.monotonic() + 120
        while not all(os.path.exists(p) for p in others) and time.monotonic() < deadline:
            time.sleep(0.05)
    sys.stdout.flush()
    sys.stderr.flush()
    if info.launcher != launch.MSRUN:
        # without msrun's scheduler to tell, MindSpore's teardown of the store-based comm threads
        # can block at exit; the result is on disk. Under msrun a worker must finish normally:
        # the scheduler counts a worker that vanished as timed out and fails the job.
        os._exit(0)


if __name__ == "__main__":
    main()
