"""``symsched.profiling`` of the PyTorch flavour: this name is :mod:`symsched.core.profiling`."""

import sys

from .torch import module

sys.modules[__name__] = module("profiling")
