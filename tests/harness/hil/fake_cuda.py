"""A fake CUDA driver library for the ctypes green-context layer (no GPU needed).

It implements the driver calls :mod:`harness.hil.green_ctx` makes, with ctypes arguments as
the real library receives them (``byref`` objects are written through ``._obj``), keeps every
call in ``calls`` and the live handles in ``green`` / ``streams``, and can fail a named call.
"""

from __future__ import annotations

import itertools
from typing import Any


def _out(ref: Any) -> Any:
    return ref._obj  # the object behind ctypes.byref()


def _val(x: Any) -> Any:
    return x.value if hasattr(x, "value") else x


class FakeCuda:
    def __init__(self, *, version: int = 12080, sms: int = 132, cc: tuple[int, int] = (9, 0),
                 stream_create: bool = True, fail: str | None = None,
                 report_rules: tuple[int, int] = (0, 0)) -> None:
        self.version, self.sms, self.cc = version, sms, cc
        self.fail = fail
        self.report_rules = report_rules
        self.calls: list[tuple[str, tuple]] = []
        self.green: dict[int, int] = {}  # handle -> SMs
        self.streams: dict[int, int] = {}  # stream -> green handle
        self.current: list[int] = []
        self._ids = itertools.count(0x1000, 0x10)
        self._desc: dict[int, int] = {}
        if not stream_create:
            self.cuGreenCtxStreamCreate = None  # hasattr() stays True; see __getattribute__

    def __getattribute__(self, name: str) -> Any:
        v = object.__getattribute__(self, name)
        if v is None and name.startswith("cu"):
            raise AttributeError(name)
        return v

    def _rc(self, name: str, args: tuple) -> int:
        self.calls.append((name, args))
        return 999 if self.fail == name else 0

    def cuGetErrorName(self, rc: int, pstr: Any) -> int:
        _out(pstr).value = b"CUDA_ERROR_FAKE"
        return 0

    def cuDriverGetVersion(self, pv: Any) -> int:
        _out(pv).value = self.version
        return self._rc("cuDriverGetVersion", ())

    def cuInit(self, flags: int) -> int:
        return self._rc("cuInit", (flags,))

    def cuDeviceGet(self, pdev: Any, ordinal: int) -> int:
        _out(pdev).value = ordinal
        return self._rc("cuDeviceGet", (ordinal,))

    def cuDeviceGetAttribute(self, pv: Any, attr: int, dev: Any) -> int:
        _out(pv).value = {16: self.sms, 75: self.cc[0], 76: self.cc[1]}[attr]
        return self._rc("cuDeviceGetAttribute", (attr,))

    def cuDeviceGetDevResource(self, dev: Any, pres: Any, typ: int) -> int:
        r = _out(pres)
        r.type, r.smCount = typ, self.sms
        r.minSmPartitionSize, r.smCoscheduledAlignment = self.report_rules
        return self._rc("cuDeviceGetDevResource", (typ,))

    def cuDevSmResourceSplitByCount(self, pres: Any, pn: Any, pin: Any, prem: Any, flags: int,
                                    min_count: int) -> int:
        rc = self._rc("cuDevSmResourceSplitByCount", (_out(pn).value, flags, min_count))
        if rc:
            return rc
        _out(pres).type, _out(pres).smCount = 1, min_count
        _out(prem).type, _out(prem).smCount = 1, _out(pin).smCount - min_count
        _out(pn).value = 1
        return 0

    def cuDevResourceGenerateDesc(self, pdesc: Any, pres: Any, n: int) -> int:
        h = next(self._ids)
        self._desc[h] = _out(pres).smCount
        _out(pdesc).value = h
        return self._rc("cuDevResourceGenerateDesc", (n, _out(pres).smCount))

    def cuGreenCtxCreate(self, pctx: Any, desc: Any, dev: Any, flags: int) -> int:
        rc = self._rc("cuGreenCtxCreate", (flags,))
        if rc:
            return rc
        h = next(self._ids)
        self.green[h] = self._desc[_val(desc)]
        _out(pctx).value = h
        return 0

    def cuCtxFromGreenCtx(self, pctx: Any, g: Any) -> int:
        _out(pctx).value = _val(g) + 1
        return self._rc("cuCtxFromGreenCtx", ())

    def cuGreenCtxStreamCreate(self, ps: Any, g: Any, flags: int, prio: int) -> int:
        rc = self._rc("cuGreenCtxStreamCreate", (flags, prio))
        if rc:
            return rc
        h = next(self._ids)
        self.streams[h] = _val(g)
        _out(ps).value = h
        return 0

    def cuCtxPushCurrent_v2(self, ctx: Any) -> int:
        self.current.append(_val(ctx))
        return self._rc("cuCtxPushCurrent_v2", ())

    def cuCtxPopCurrent_v2(self, pctx: Any) -> int:
        _out(pctx).value = self.current.pop()
        return self._rc("cuCtxPopCurrent_v2", ())

    def cuStreamCreate(self, ps: Any, flags: int) -> int:
        h = next(self._ids)
        self.streams[h] = self.current[-1] - 1  # the green context behind the current ctx
        _out(ps).value = h
        return self._rc("cuStreamCreate", (flags,))

    def cuStreamDestroy_v2(self, s: Any) -> int:
        self.streams.pop(_val(s))
        return self._rc("cuStreamDestroy_v2", ())

    def cuGreenCtxDestroy(self, g: Any) -> int:
        self.green.pop(_val(g))
        return self._rc("cuGreenCtxDestroy", ())


