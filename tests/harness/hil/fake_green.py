"""Fakes of the two kept libraries' green-context APIs, with the signatures of the releases the
harness targets: ``cuda.core`` 1.2.2 (``Device``, ``Device.resources.sm``, ``SMResource.split``,
``SMResourceOptions``, ``ContextOptions``, ``Device.create_context``, ``Context.create_stream``,
``Stream.__cuda_stream__``) and PyTorch 2.13's ``torch.cuda.green_contexts`` (keyword-only
``GreenContext.create(*, num_sms, device_id, ...)``, ``GreenContext.Stream()``). They record what
is alive so a test can check that a pool releases everything."""

from __future__ import annotations

import itertools
import types
from collections import namedtuple
from dataclasses import dataclass
from typing import Any

_ids = itertools.count(0x7000, 0x10)
ComputeCapability = namedtuple("ComputeCapability", "major minor")


@dataclass
class SMResourceOptions:
    count: Any = None
    coscheduled_sm_count: Any = None
    preferred_coscheduled_sm_count: Any = None
    backfill: Any = False


@dataclass
class ContextOptions:
    resources: Any


class FakeCore:
    """``cuda.core``: one device of ``sms`` SMs; ``live`` holds open contexts and streams."""

    def __init__(self, sms: int = 132, cc: tuple[int, int] = (9, 0), rules=(8, 8),
                 fail_split: bool = False) -> None:
        self.live: dict[int, str] = {}
        self.splits: list[int] = []
        core = self
        self.SMResourceOptions = SMResourceOptions
        self.ContextOptions = ContextOptions
        self.__version__ = "1.2.2"

        class SMResource:
            def __init__(self, n: int) -> None:
                self.sm_count = n
                self.min_partition_size, self.coscheduled_alignment = rules

            def split(self, options: SMResourceOptions, *, dry_run: bool = False):
                if fail_split:
                    raise RuntimeError("CUDA_ERROR_NOT_SUPPORTED: cuDevSmResourceSplit")
                assert isinstance(options, SMResourceOptions)
                core.splits.append(options.count)
                return [SMResource(options.count)], SMResource(self.sm_count - options.count)

        class Stream:
            def __init__(self) -> None:
                self.ptr = next(_ids)
                core.live[self.ptr] = "stream"

            def __cuda_stream__(self):
                return (0, self.ptr)

            def close(self) -> None:
                core.live.pop(self.ptr, None)

        class Context:
            def __init__(self, group: SMResource) -> None:
                self.id, self.group = next(_ids), group
                core.live[self.id] = "context"

            def create_stream(self, options=None) -> Stream:
                return Stream()

            def close(self) -> None:
                core.live.pop(self.id, None)

        class Device:
            def __init__(self, device_id: int = 0) -> None:
                self.device_id = device_id
                self.compute_capability = ComputeCapability(*cc)
                self.resources = types.SimpleNamespace(sm=SMResource(sms))

            def set_current(self, ctx=None) -> None:
                return None

            def create_context(self, options: ContextOptions) -> Context:
                assert isinstance(options, ContextOptions) and len(options.resources) == 1
                return Context(options.resources[0])

        self.Device = Device


class FakeTorch:
    """``torch`` with ``torch.cuda.green_contexts`` as in PyTorch 2.13."""

    def __init__(self, sms: int = 132, major: int = 9) -> None:
        self.made: list[int] = []
        fake = self

        class Stream:
            def __init__(self) -> None:
                self.cuda_stream = next(_ids)

        class GreenContext:
            @staticmethod
            def create(*, num_sms=None, workqueue_scope=None, workqueue_concurrency_limit=None,
                       device_id=None):
                fake.made.append(num_sms)
                ctx = GreenContext()
                ctx.num_sms, ctx.stream, ctx.log = num_sms, Stream(), []
                return ctx

            def Stream(self):
                return self.stream

            def set_context(self):
                self.log.append("set")

            def pop_context(self):
                self.log.append("pop")

        self.cuda = types.SimpleNamespace(
            green_contexts=types.SimpleNamespace(GreenContext=GreenContext, SUPPORTED=True),
            Stream=lambda device=None: Stream(),
            get_device_properties=lambda d: types.SimpleNamespace(
                multi_processor_count=sms, major=major, minor=0))
