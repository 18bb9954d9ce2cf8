"""How far the per-case distance's tail reaches at a false-failure rate: a generalized-Pareto fit with its confidence.

A tolerance must hold with probability ``1 - p`` per case (``p`` = 1e-6: one false failure in a million
cases). The worst of ``n`` draws says nothing about ``p << 1/n``; the tail above a high threshold does.

**Method** (peaks over threshold). ``t`` = the ``threshold_q`` quantile of the per-case distances ``d``; the
``k`` exceedances ``y = d - t`` (``d > t``) are fitted with a generalized Pareto distribution (GPD)
``P(Y > y) = (1 + xi y / sigma)^(-1 / xi)`` by probability-weighted moments (Hosking & Wallis 1987: with the
ascending exceedances, ``a0 = mean(y)``, ``a1 = mean(y_i (k - i) / (k - 1))``, ``xi = 2 - a0 / (a0 - 2 a1)``,
``sigma = 2 a0 a1 / (a0 - 2 a1)``; closed form, no optimiser). With ``zeta = k / n``, the distance exceeded
with probability ``p`` is ``u(p) = t + sigma / xi ((zeta / p)^xi - 1)`` (``t + sigma ln(zeta / p)`` at
``xi = 0``).

**Confidence**: ``u(p)`` is recomputed on ``boot`` bootstrap resamples of ``d``; ``u_upper`` is their 95th
percentile (what a tolerance takes). **Support**: the fit supports the target when it has at least
``MIN_EXCEEDANCES`` exceedances and the bootstrap's 95th percentile is within ``MAX_SPREAD`` times its median —
otherwise the answer is honest: *n draws are not enough*, with ``need`` = the draws for which the spread would
shrink to the limit (the spread of a quantile estimate falls as ``1 / sqrt(n)``).

Distances are integers (ULP); the fit treats them as continuous and the tolerance is ``ceil(u_upper)``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

MIN_EXCEEDANCES = 30
MAX_SPREAD = 1.5
THRESHOLD_Q = 0.9
BOOTSTRAP = 200


@dataclass
class TailFit:
    draws: int
    target: float
    threshold: float
    exceedances: int
    xi: float
    sigma: float
    u_target: float       # the point estimate of the distance exceeded with probability ``target``
    u_upper: float        # its bootstrap 95th percentile
    supported: bool
    need: int             # draws the fit would need to support the target (``draws`` when it does)
    reason: str = ""

    @property
    def tolerance(self) -> int:
        return int(math.ceil(self.u_upper))

    def as_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        head = (f"GPD tail over t={self.threshold:g} ({self.exceedances} of {self.draws} draws above it): xi={self.xi:.3g}, "
                f"sigma={self.sigma:.3g}; u(p={self.target:g}) = {self.u_target:.3g}, 95% upper {self.u_upper:.3g}")
        if self.supported:
            return head
        return f"{head}; {self.draws} draws are not enough: need ~{self.need:,} ({self.reason})"


def _pwm(y: np.ndarray) -> tuple[float, float]:
    """(xi, sigma) of a GPD by probability-weighted moments (``y`` > 0)."""
    y = np.sort(y)
    k = y.size
    a0 = float(y.mean())
    a1 = float(np.mean(y * (k - 1 - np.arange(k)) / max(1, k - 1)))
    denom = a0 - 2 * a1
    if denom <= 0 or a0 <= 0:
        return 0.0, max(a0, 1e-12)
    return 2 - a0 / denom, 2 * a0 * a1 / denom


def _quantile(d: np.ndarray, target: float, threshold_q: float) -> tuple[float, int, float, float]:
    """(u(target), exceedances, xi, sigma) of one sample."""
    t = float(np.quantile(d, threshold_q))
    y = d[d > t] - t
    k = int(y.size)
    if k < 2:
        return float(d.max()), k, 0.0, 0.0
    xi, sigma = _pwm(y)
    zeta = k / d.size
    if target >= zeta:
        return float(np.quantile(d, 1 - target)), k, xi, sigma
    if abs(xi) < 1e-9:
        u = t + sigma * math.log(zeta / target)
    else:
        u = t + sigma / xi * ((zeta / target) ** xi - 1)
    return float(max(u, d.max())), k, xi, sigma


def fit(distances, target: float, *, threshold_q: float = THRESHOLD_Q, boot: int = BOOTSTRAP, seed: int = 0) -> TailFit:
    """The GPD tail fit of per-case distances at false-failure rate ``target`` (module docstring)."""
    d = np.asarray(distances, dtype=np.float64)
    d = d[np.isfinite(d)]
    n = int(d.size)
    if n == 0:
        return TailFit(0, target, 0.0, 0, 0.0, 0.0, 0.0, 0.0, False, MIN_EXCEEDANCES * 10, "no draws")
    if d.max() == 0:
        # never a difference: the empirical bound is the rule of three (p < 3 / n at 95 %)
        need = int(math.ceil(3 / target))
        return TailFit(n, target, 0.0, 0, 0.0, 0.0, 0.0, 0.0, n >= need, max(n, need),
                       "" if n >= need else "no difference seen: certifying the target empirically needs 3 / p draws")
    u, k, xi, sigma = _quantile(d, target, threshold_q)
    rng = np.random.default_rng(seed)
    boots = np.array([_quantile(d[rng.integers(0, n, n)], target, threshold_q)[0] for _ in range(boot)])
    upper, median = float(np.percentile(boots, 95)), float(np.median(boots))
    spread = upper / median if median > 0 else math.inf
    reason, need = "", n
    if k < MIN_EXCEEDANCES:
        reason = f"{k} exceedances above the threshold, at least {MIN_EXCEEDANCES} needed"
        need = int(math.ceil(n * MIN_EXCEEDANCES / max(k, 1)))
    if spread > MAX_SPREAD:
        reason = (reason + "; " if reason else "") + (f"the bootstrap's 95th percentile is {spread:.2g}x its median "
                                                      f"(at most {MAX_SPREAD:g}x)")
        growth = ((spread - 1) / (MAX_SPREAD - 1)) ** 2 if math.isfinite(spread) else 100.0
        need = max(need, int(math.ceil(n * growth)))
    return TailFit(n, target, float(np.quantile(d, threshold_q)), k, float(xi), float(sigma), u, max(upper, u),
                   not reason, need, reason)
