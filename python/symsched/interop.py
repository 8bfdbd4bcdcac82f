"""``symsched.interop`` of the PyTorch flavour: this name is :mod:`symsched.torch.interop`."""

import sys

from .torch import module

sys.modules[__name__] = module("interop")
