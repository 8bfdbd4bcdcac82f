"""``symsched.memory`` of the PyTorch flavour: this name is :mod:`symsched.core.memory`."""

import sys

from .torch import module

sys.modules[__name__] = module("memory")
