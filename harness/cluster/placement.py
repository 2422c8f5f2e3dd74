"""Which GPU a new job goes to, among the GPUs where it fits (utilization and memory).

* ``first-fit`` (the GPUColo paper, Sec. IV): the earliest powered-on GPU that fits.
* ``kace`` (the KACE paper): a linear regression, trained once on profiled pairs, predicts the
  co-location slowdown of a pair of jobs from their *exclusive-run* features; the job goes to
  the GPU with the smallest predicted total slowdown with the jobs already there.
* ``mudi`` (the Mudi paper, Sec. 5.2): smallest latency slope. The predicted slope of an inference
  job's latency with respect to a co-runner is ``sigma_i * beta_k`` (profiled sensitivity
  times pressure). A training job goes to the GPU, among those hosting inference, whose
  inference jobs have the smallest mean slope with it; an inference job goes to the GPU whose
  current co-runners give it the smallest slope. GPUs without a candidate fall back to
  first-fit order.

Exclusive-run features are the task's profile measured with noise (the traces carry no
kernel metrics): ``[demand, beta*demand (DRAM pressure), sigma (sensitivity), mem/32]``.
Placement only chooses among existing GPUs that fit; when none fits a GPU is powered on.
Choosing the least-interfering GPU instead of the first that fits still packs worse, so the
interference-aware placements trade some GPUs for fewer SLO misses.
"""

from __future__ import annotations

import numpy as np

PLACEMENTS = ("first-fit", "kace", "mudi")
N_FEAT = 4


def observed_features(demand: np.ndarray, beta: np.ndarray, sigma: np.ndarray,
                      mem_gb: np.ndarray, *, noise: float = 0.1, seed: int = 0) -> np.ndarray:
    """Exclusive-run profile of every task: true values times (1 + noise * N(0, 1))."""
    rng = np.random.default_rng(seed + 7)
    f = np.stack([demand, beta * demand, sigma, mem_gb / 32.0], axis=1)
    return f * (1.0 + noise * rng.standard_normal(f.shape))


def pair_design(fx: np.ndarray, fy: np.ndarray) -> np.ndarray:
    """KACE pair features: [1, fx + fy, vec(fx fy^T + fy fx^T) / 2] (rows are pairs)."""
    n = len(fx)
    outer = (fx[:, :, None] * fy[:, None, :] + fy[:, :, None] * fx[:, None, :]) / 2
    return np.concatenate([np.ones((n, 1)), fx + fy, outer.reshape(n, -1)], axis=1)


class KacePredictor:
    """Linear regression of pair slowdown on pair features (least squares), after the KACE
    paper. Build it with :meth:`train`.

    Parameters
    ----------
    coef : numpy.ndarray
        Coefficients over :func:`pair_design`'s columns.
    r2 : float
        In-sample R^2 of the fit.
    n_pairs : int
        Number of profiled pairs it was fitted on.
    """

    def __init__(self, coef: np.ndarray, r2: float, n_pairs: int) -> None:
        self.coef = coef
        self.r2 = r2
        self.n_pairs = n_pairs
        F = N_FEAT
        self.w0 = coef[0]
        self.w1 = coef[1:1 + F]
        self.W = coef[1 + F:].reshape(F, F)

    @classmethod
    def train(cls, feats: np.ndarray, demand: np.ndarray, beta: np.ndarray, sigma: np.ndarray,
              gamma: float, *, n_pairs: int = 300, seed: int = 0) -> KacePredictor:
        """Profile ``n_pairs`` random pairs (true pair slowdown at full demand, 5 % noise) and
        fit. Returns the predictor; ``r2`` is its in-sample R^2."""
        rng = np.random.default_rng(seed + 11)
        n = len(demand)
        if n < 2:
            return cls(np.zeros(1 + N_FEAT + N_FEAT ** 2), 0.0, 0)
        a = rng.integers(0, n, n_pairs)
        b = rng.integers(0, n, n_pairs)
        y = gamma * (sigma[a] * beta[b] * demand[b] + sigma[b] * beta[a] * demand[a])
        y = y * (1.0 + 0.05 * rng.standard_normal(n_pairs))
        X = pair_design(feats[a], feats[b])
        coef, *_ = np.linalg.lstsq(X, y, rcond=None)
        res = y - X @ coef
        r2 = 1.0 - float(res @ res) / max(float(((y - y.mean()) ** 2).sum()), 1e-12)
        return cls(coef, r2, n_pairs)

    def gpu_scores(self, fx: np.ndarray, count: np.ndarray, fsum: np.ndarray) -> np.ndarray:
        """Sum over the jobs already on each GPU of the predicted pair slowdown with ``fx``.

        With ``count[g]`` jobs whose features sum to ``fsum[g]``, and ``phi`` bilinear:
        ``sum_y w.phi(x, y) = count (w0 + w1.fx) + w1.fsum + fsum' Ws fx``
        (``Ws`` the symmetric part of the interaction weights).
        """
        Ws = (self.W + self.W.T) / 2
        lin = self.w0 + self.w1 @ fx
        return count * lin + fsum @ self.w1 + fsum @ (Ws @ fx)


def choose(name: str, cand: np.ndarray, order: np.ndarray, *, fx: np.ndarray | None = None,
           kind: int = 0, count: np.ndarray | None = None, fsum: np.ndarray | None = None,
           n_inf: np.ndarray | None = None, sig_inf: np.ndarray | None = None,
           press: np.ndarray | None = None, kace: KacePredictor | None = None) -> int:
    """Pick one GPU slot among the candidate slots ``cand`` (non-empty, fitting).

    Parameters
    ----------
    name : str
        The placement, one of :data:`PLACEMENTS`.
    cand : numpy.ndarray
        Candidate slots (non-empty).
    order : numpy.ndarray
        Power-on counter per slot (first-fit order).
    fx : numpy.ndarray, optional
        The job's observed features (``kace``, ``mudi``).
    kind : int
        The job's kind (0 inference, 1 training).
    count, fsum : numpy.ndarray, optional
        Jobs and summed features per slot (``kace``).
    n_inf, sig_inf, press : numpy.ndarray, optional
        Inference jobs, their summed sensitivity and the pressure per slot (``mudi``).
    kace : KacePredictor, optional
        The trained predictor (``kace``).

    Returns
    -------
    int
        The chosen slot.
    """
    if name == "first-fit" or len(cand) == 1:
        return int(cand[np.argmin(order[cand])])
    if name == "kace":
        if kace is None or fx is None or count is None or fsum is None:
            raise ValueError("placement 'kace' needs kace, fx, count and fsum")
        score = kace.gpu_scores(fx, count[cand], fsum[cand])
    elif name == "mudi":
        if fx is None:
            raise ValueError("placement 'mudi' needs fx")
        if kind == 1:   # training: GPUs hosting inference, smallest mean slope
            if n_inf is None or sig_inf is None:
                raise ValueError("placement 'mudi' needs n_inf and sig_inf for a training job")
            ni = n_inf[cand]
            slope = np.where(ni > 0, sig_inf[cand] * fx[1] / np.maximum(ni, 1), np.inf)
            if not np.isfinite(slope).any():
                return int(cand[np.argmin(order[cand])])
            score = slope
        else:           # inference: smallest slope against the co-runners already there
            if press is None:
                raise ValueError("placement 'mudi' needs press for an inference job")
            score = fx[2] * press[cand]
    else:
        raise ValueError(f"unknown placement {name!r}; choose from {', '.join(PLACEMENTS)}")
    best = np.min(score)
    tie = cand[score <= best + 1e-12]
    return int(tie[np.argmin(order[tie])])
