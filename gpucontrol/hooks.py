"""``gpucontrol.hooks``: the public name training loops import (``from gpucontrol.hooks import
after_iteration``). It is the module :mod:`gpucontrol.node.hooks` itself, under a second name,
so state and patches are shared."""

import sys

from gpucontrol.node import hooks as _hooks

sys.modules[__name__] = _hooks
