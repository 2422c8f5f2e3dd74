"""The CPU plant's model: a small MLP with forward, backward and an SGD step.

numpy by default; PyTorch on the CPU when it is importable and asked for (``backend="torch"``
or ``"auto"``). The same network serves inference batches (:mod:`harness.hil.cpu.inference`)
and trains (:mod:`harness.hil.cpu.training`).

Examples
--------
>>> import numpy as np
>>> m = make_model("numpy", sizes=(32, 64, 10), seed=0)
>>> x = np.random.default_rng(0).standard_normal((8, 32)).astype(np.float32)
>>> m.forward(x).shape
(8, 10)
>>> y = np.zeros(8, dtype=np.int64)
>>> l0 = m.train_step(x, y, lr=0.1)
>>> l1 = m.train_step(x, y, lr=0.1)
>>> l1 < l0
True
"""

from __future__ import annotations

import importlib.util
import itertools
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

__all__ = ["BACKENDS", "Model", "NumpyMLP", "make_model", "resolve_backend"]

BACKENDS = ("auto", "numpy", "torch")


class Model(Protocol):
    """What the services need of a network."""

    backend: str

    def forward(self, x: np.ndarray) -> Any: ...

    def train_step(self, x: np.ndarray, y: np.ndarray, lr: float) -> float: ...


class NumpyMLP:
    """ReLU MLP with softmax cross-entropy, plain numpy (float32).

    Parameters
    ----------
    sizes : sequence of int
        Layer widths, input first, classes last.
    seed : int
        Weight initialisation seed.
    """

    backend = "numpy"

    def __init__(self, sizes: Sequence[int], seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.w = [(rng.standard_normal((a, b)) * np.sqrt(2.0 / a)).astype(np.float32)
                  for a, b in itertools.pairwise(sizes)]
        self.b = [np.zeros(b, dtype=np.float32) for b in sizes[1:]]

    def _layers(self, x: np.ndarray) -> list[np.ndarray]:
        acts = [x]
        for i, (w, b) in enumerate(zip(self.w, self.b)):
            z = acts[-1] @ w + b
            acts.append(np.maximum(z, 0.0) if i < len(self.w) - 1 else z)
        return acts

    def forward(self, x: np.ndarray) -> np.ndarray:
        """Logits for a batch.

        Parameters
        ----------
        x : numpy.ndarray
            ``(batch, sizes[0])``.

        Returns
        -------
        numpy.ndarray
            ``(batch, sizes[-1])``.
        """
        return self._layers(x)[-1]

    def train_step(self, x: np.ndarray, y: np.ndarray, lr: float) -> float:
        """Forward, backward (cross-entropy) and one SGD step.

        Parameters
        ----------
        x : numpy.ndarray
            Inputs ``(batch, sizes[0])``.
        y : numpy.ndarray
            Integer labels ``(batch,)``.
        lr : float
            Learning rate.

        Returns
        -------
        float
            The batch loss before the step.
        """
        acts = self._layers(x)
        z = acts[-1] - acts[-1].max(axis=1, keepdims=True)
        p = np.exp(z)
        p /= p.sum(axis=1, keepdims=True)
        n = x.shape[0]
        loss = float(-np.log(p[np.arange(n), y] + 1e-12).mean())
        g = p
        g[np.arange(n), y] -= 1.0
        g /= n
        for i in range(len(self.w) - 1, -1, -1):
            gw = acts[i].T @ g
            gb = g.sum(axis=0)
            if i > 0:
                g = (g @ self.w[i].T) * (acts[i] > 0)
            self.w[i] -= lr * gw
            self.b[i] -= lr * gb
        return loss


class _TorchMLP:
    backend = "torch"

    def __init__(self, sizes: Sequence[int], seed: int = 0, threads: int | None = None) -> None:
        import torch

        if threads:
            torch.set_num_threads(threads)
        torch.manual_seed(seed)
        layers: list[Any] = []
        for i, (a, b) in enumerate(itertools.pairwise(sizes)):
            layers.append(torch.nn.Linear(a, b))
            if i < len(sizes) - 2:
                layers.append(torch.nn.ReLU())
        self.torch = torch
        self.net = torch.nn.Sequential(*layers)
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.01)
        self.loss = torch.nn.CrossEntropyLoss()

    def forward(self, x: np.ndarray) -> Any:
        with self.torch.inference_mode():
            return self.net(self.torch.from_numpy(x)).numpy()

    def train_step(self, x: np.ndarray, y: np.ndarray, lr: float) -> float:
        for g in self.opt.param_groups:
            g["lr"] = lr
        self.opt.zero_grad()
        loss = self.loss(self.net(self.torch.from_numpy(x)), self.torch.from_numpy(y))
        loss.backward()
        self.opt.step()
        return float(loss.item())


def resolve_backend(backend: str) -> str:
    """``"auto"`` -> ``"torch"`` when PyTorch is importable, else ``"numpy"``.

    Parameters
    ----------
    backend : {'auto', 'numpy', 'torch'}
        The request.

    Returns
    -------
    str
        ``"numpy"`` or ``"torch"``.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if backend == "auto":
        return "torch" if importlib.util.find_spec("torch") is not None else "numpy"
    return backend


def make_model(backend: str = "numpy", sizes: Sequence[int] = (256, 512, 512, 10),
               seed: int = 0, threads: int | None = None) -> Model:
    """Build the network on ``backend``.

    Parameters
    ----------
    backend : {'auto', 'numpy', 'torch'}
        Which library computes.
    sizes : sequence of int
        Layer widths.
    seed : int
        Initialisation seed.
    threads : int or None
        PyTorch intra-op threads (numpy: set ``OMP_NUM_THREADS`` before start instead).

    Returns
    -------
    Model
        The network.
    """
    if resolve_backend(backend) == "torch":
        return _TorchMLP(sizes, seed, threads)
    return NumpyMLP(sizes, seed)
