"""The diagnosis rules: one small pure function per cause, over the window's signals and the target's facts.

A rule fires (with a strength 0..1 and evidence carrying the numbers), clears, or abstains (naming what it
lacked). A fired finding may be *informational*: shown, never a verdict or an alert. Rules read structure --
shares of TTFT, ratios, SLO breaches, corroborating signals -- not absolute cut-offs tuned to one deployment,
and every symptom starts from a user-visible effect or a stated objective (an SLO breach, a queue,
preemptions, restarts). A cause that another active cause explains better clears and says so.

One module per symptom class (``a_ttft`` ... ``g_parallelism``), each cause's function registered under its
catalog id by ``@rule``; what several classes share sits in ``finding`` (the result and its words),
``effects`` (the objectives as breaches), ``conditions`` and ``prefix``. A second pass (``unexplained``)
reads the first pass's findings: an objective missed that no cause of the classes explaining it accounts
for is named as an effect without a known cause (A0, B0: layer ``unknown``). To add a cause, see
docs/architecture.md ("To add ..., edit").
"""

from __future__ import annotations

from exporter.catalog.symptoms import CAUSES
from exporter.diagnosis.rules import (  # noqa: F401  (importing a class module registers its rules)
    a_ttft,
    b_itl,
    c_throughput,
    d_preemption,
    e_headroom,
    f_prefix_cache,
    g_parallelism,
    unexplained,
)
from exporter.diagnosis.rules.finding import (
    REGISTERED,
    REGISTERED_EXPLAINING,
    Context,
    ExplainingRule,
    Finding,
    Rule,
    unknown_fact,
)

__all__ = ["EXPLAINING_RULES", "RULES", "Context", "ExplainingRule", "Finding", "Rule", "unknown_fact"]

# In the catalog's order (A1 ... G2), each cause once.
RULES: tuple[tuple[str, Rule], ...] = tuple((c.id, REGISTERED[c.id]) for c in CAUSES if c.id in REGISTERED)
# Evaluated after RULES, with their findings.
EXPLAINING_RULES: tuple[tuple[str, ExplainingRule], ...] = tuple(
    (c.id, REGISTERED_EXPLAINING[c.id]) for c in CAUSES if c.id in REGISTERED_EXPLAINING)
