"""The MindSpore side of symsched: what differs from PyTorch, one concept per module.

* :mod:`.tensors` — heap span ↔ ``mindspore.Tensor`` (zero-copy), tensor → span;
* :mod:`.groups` — MindSpore group names (and rank lists) ↔ member world ranks;
* :mod:`.launch` — rank/world discovery under ``msrun`` and ``symsched launch``, job id;
* :mod:`.mode` — PyNative-only guard (graph mode / ``ms.jit`` silently zero gradients);
* :mod:`.autograd` — custom backward through ``mindspore._Function`` (PyNative);
* :mod:`.mccl` — MindSpore's own collectives (interop, reference, host-collective steps);
* :mod:`.profiler` — op ranges in MindSpore's profiler where it records them.

Nothing here imports torch. Importing this package does not import MindSpore either; each
module does, when first imported.
"""
