"""What a prefix-cache hit costs, carried as an unidentified parameter into the prediction's interval.

A prompt token served from the prefix cache is not prefilled, but the step that admits its request may still pay
for it: the new tokens attend over the cached context. On the CPU build's small models that is 0.4-0.8 of an
uncached token's cost, on a wide MLP-bound model about nothing. A window at one template share cannot tell
(every prompt carries the same cached length, so its cost sits in the step's fixed part; at share 0 nothing is
cached to cost). The prediction takes ``advice_cached_token_weight`` (0: a cached token is free, the matrix-bound
step's physics); its interval takes the whole declared range: the prediction re-run at both ends (``brackets``),
each refitted to the window where the window itself holds hits, their log spread over sqrt(12) (a uniform's
standard deviation over the range) as one more parameter term of ``predict.sigma``.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING

from exporter.catalog.thresholds import BY_KEY

if TYPE_CHECKING:
    from exporter.advisor.calibrate import Calibration, Outcome

_ENTRY = BY_KEY["advice_cached_token_weight"]
RANGE = (_ENTRY.minimum, _ENTRY.maximum if _ENTRY.maximum is not None else 1.0)
# The two ends of a uniform are sqrt(12) of its standard deviations apart: what their spread is divided by.
SPAN = math.sqrt(12.0)


def brackets(cal: Calibration, baseline: Outcome) -> tuple[tuple[Calibration, Outcome], ...]:
    """The calibration at both ends of the cached-token weight's range, with its own simulated window:
    refitted where the window held prefix hits (their cost is part of its steps), else the same fit, whose window
    the weight does not touch (``baseline``). Empty without prefix caching."""
    from exporter.advisor.calibrate import CannotCalibrate, refit

    if not cal.enable_prefix_caching:
        return ()
    out = []
    for weight in RANGE:
        cost = replace(cal.cost, cached_weight=weight)
        if not cal.shared_prefix_tokens:
            out.append((replace(cal, cost=cost), baseline))
            continue
        try:
            out.append(refit(cal, cost))
        except CannotCalibrate:
            return ()
    return tuple(out)
