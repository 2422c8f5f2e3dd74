"""Former name of :mod:`harness.hil` (the GPU hardware-in-the-loop harness).

Only ``python -m harness.gpu.campaign`` is kept here, for the command lines that use it; import
:mod:`harness.hil` in code.
"""
