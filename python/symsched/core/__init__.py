"""The framework-neutral core of symsched: no framework is imported here.

Module map (each module imports only modules above it in this list; ``tests/test_imports.py``
checks that no module of the package imports one that imports it back):

* :mod:`~symsched.core.errors` — the exception types;
* :mod:`~symsched.core.dtypes` — the runtime's element types by name, wire formats;
* :mod:`~symsched.core.knobs` — the knob table: every environment variable, parsed and validated;
* :mod:`~symsched.core.enums` — reduce, compare and signal ops;
* :mod:`~symsched.core.adapter` — the interface a framework implements, and the installed one;
* :mod:`~symsched.core.native` — the compiled module ``symsched._native``;
* :mod:`~symsched.core.interop` — the interop rule's records (RFC §5.4);
* :mod:`~symsched.core.profiling` — profiler ranges and the ``SYMSCHED_TRACE`` writer;
* :mod:`~symsched.core.schedules` — schedule choice and its thresholds;
* :mod:`~symsched.core.nodes` — groups spanning nodes: the hierarchical handle;
* :mod:`~symsched.core.aborts` — a group's abort on this rank: its publication, the collective
  reset, the refusal of one-sided operations;
* :mod:`~symsched.core.state` — runtime bootstrap, availability, the group cache;
* :mod:`~symsched.core.failure` — failure propagation: a failing call aborts its group;
* :mod:`~symsched.core.memory` — the symmetric heap as tensors, and its bookkeeping;
* :mod:`~symsched.core.launch` — prepared launches, running a schedule, declared duals;
* :mod:`~symsched.core.validate` — argument checks;
* :mod:`~symsched.core.coll` — the collectives' kernels and the call protocol with its cache;
* :mod:`~symsched.core.primitives` — the one-sided primitives;
* :mod:`~symsched.core.rules` — the autograd rules (forward, and the dual each backward launches);
* :mod:`~symsched.core.functional` — the differentiable out-of-place forms;
* :mod:`~symsched.core.collectives` — the RFC's in-place forms;
* :mod:`~symsched.core.mc2` — the MC2 fused ops and the matmul engine choice.
"""
