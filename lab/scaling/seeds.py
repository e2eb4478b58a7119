"""The fleet experiment's seeds, fixed before any tuning of the scaling signal on them.

``TUNING``: the seeds the signal and the scenario were tuned on (seen; their scores are in-sample).
``VALIDATION``: held out, written here before the signal's next change was tried; each is scored once, at
a named commit, with ``python -m lab.scaling --seed N``, and every score (misses included) goes into the
table in docs/deployment.md#autoscaling (docs/data/scaling.json). Once scored a seed is spent: the next
fresh set starts after the highest seed listed here: 2-4 were scored at 3333ff2, 5-7 were added when 2-4 were
spent, before the next change was scored on them (scored at 7199044); 8-10 were added when 5-7 were spent,
before the signal's next change was tried (scored at 55dcdbf); 11-13 were added when 8-10 were spent, before
the change after that.
"""

from __future__ import annotations

TUNING: tuple[int, ...] = (0, 1)
VALIDATION: tuple[int, ...] = (2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13)
