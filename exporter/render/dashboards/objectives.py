"""Objectives (SLO) panels: attainment, burn rate and error budget from the SLI recording rules."""

from __future__ import annotations

from dataclasses import dataclass

import grafanalib.core as g

from exporter.config import SLO_PERIOD_DAYS
from exporter.render import slo as slo_rules
from exporter.render.dashboards.panels import (
    EVENTS_PER_S,
    GREEN,
    MODEL_SEL,
    RANGE,
    RAW_SEL,
    RED,
    TIMES,
    Layout,
    Query,
    _burn_source,
    _burn_steps,
    _by_name,
    _link,
    diag,
    overview_url,
    stat,
    table,
    timeseries,
)
from exporter.render.promql import PromQL

# ---------------------------------------------------------------------------------------------
# Objectives (SLO): attainment, burn rate and error budget from the SLI recording rules
# ---------------------------------------------------------------------------------------------

# A model is (cluster, namespace, model_name), as in the per-model recordings (exporter.render.slo).
SLI_BY = ", ".join((*slo_rules.MODEL_LABELS, "objective"))
SHORT_WINDOW = slo_rules.SLI_WINDOWS[0]  # the finest recording: sums over the dashboard range
LONG_WINDOW = slo_rules.SLI_WINDOWS[-1]  # the longest: the budget estimate
BURN_WINDOWS: tuple[str, ...] = ("1h", "6h", LONG_WINDOW)
assert set(BURN_WINDOWS) <= set(slo_rules.SLI_WINDOWS) and LONG_WINDOW.endswith("d")
LONG_WINDOW_DAYS = int(LONG_WINDOW[:-1])
ALL_OBJECTIVES = ""  # objective matcher value that selects every objective


@dataclass(frozen=True, slots=True)
class Sli:
    """SLI queries at one level: per replica (summed over the selected targets, overview) or per
    model (the namespace_model recordings, fleet); ``objective`` empty selects all three."""

    per_model: bool
    objective: str = ALL_OBJECTIVES

    def _series(self, record: str) -> str:
        sel = MODEL_SEL if self.per_model else RAW_SEL
        if self.objective:
            sel += f', objective="{self.objective}"'
        return f"{record}{{{sel}}}"

    def _sum(self, record: str, *, over_range: bool = False) -> str:
        series = self._series(record)
        return f"sum by ({SLI_BY}) ({f'sum_over_time({series}[{RANGE}])' if over_range else series})"

    def events(self, window: str, *, over_range: bool = False) -> str:
        rec = slo_rules.model_events(window) if self.per_model else slo_rules.pod_events(window)
        return self._sum(rec, over_range=over_range)

    def bad(self, window: str, *, over_range: bool = False) -> str:
        rec = slo_rules.model_bad_events(window) if self.per_model else slo_rules.pod_bad_events(window)
        return self._sum(rec, over_range=over_range)

    def good(self, window: str) -> str:
        return f"{self.events(window)}\n-\n{self.bad(window)}"

    def attainment(self) -> str:
        """Good share over the dashboard range: the 5m recordings summed over the range (each
        evaluation weighs the same, so the ratio is that of the events in the range)."""
        ratio = PromQL.divide(self.bad(SHORT_WINDOW, over_range=True), self.events(SHORT_WINDOW, over_range=True))
        return f"1 - (\n{ratio}\n)"

    def burn(self, window: str) -> str:
        if self.per_model:  # the recorded per-model burn rate; the sum drops __name__, so a table
            return self._sum(slo_rules.model_burn(window))  # merges it with the computed columns
        # Replicas summed first: the burn of the selected targets together, not an average of rates.
        return (f"{PromQL.divide(self.bad(window), self.events(window))}\n"
                f"/ on (objective) group_left ()\n{slo_rules.ERROR_BUDGET_RECORD}")

    def budget_left(self) -> str:
        """1 - the share of the period's budget that the longest window spent."""
        return f"1 - (\n{self.burn(LONG_WINDOW)}\n) * {LONG_WINDOW_DAYS} / {SLO_PERIOD_DAYS}"


def objective_target(objective: str) -> Query:
    """The objective's target (1 - its error budget), a constant recording: not filtered."""
    return f'1 - {slo_rules.ERROR_BUDGET_RECORD}{{objective="{objective}"}}', "objective"


SLI_METRICS = (slo_rules.pod_events(SHORT_WINDOW), slo_rules.pod_bad_events(SHORT_WINDOW))
BUDGET_TEXT = (f"Error budget left, counting only the last {LONG_WINDOW_DAYS} days: 1 - burn rate "
               f"({LONG_WINDOW}) x {LONG_WINDOW_DAYS}/{SLO_PERIOD_DAYS}, i.e. the {SLO_PERIOD_DAYS}-day budget minus "
               f"what the last {LONG_WINDOW_DAYS} days spent. Prometheus keeps no {SLO_PERIOD_DAYS}-day SLI here, "
               f"so budget spent earlier in the period is not subtracted: an upper bound on what is left.")


def _attainment_stat(objective: str) -> g.Panel:
    sli = Sli(per_model=False, objective=objective)
    title = slo_rules.OBJECTIVE_TITLE[objective]
    return stat(f"{title} attainment", f"Share of good {title} events over the dashboard's time range for the "
                "selected targets (per model), next to the objective's target. Set the range to "
                f"{SLO_PERIOD_DAYS} days for the period's attainment.",
                [(sli.attainment(), "{{namespace}} {{model_name}}"), objective_target(objective)],
                metrics=[*SLI_METRICS, slo_rules.ERROR_BUDGET_RECORD], unit="percentunit", decimals=3)


def _burn_stat(objective: str) -> g.Panel:
    sli = Sli(per_model=False, objective=objective)
    title = slo_rules.OBJECTIVE_TITLE[objective]
    return stat(f"{title} burn rate", f"Error-budget burn rate of the selected targets over {', '.join(BURN_WINDOWS)}"
                f": 1 spends the budget exactly over {SLO_PERIOD_DAYS} days. {_burn_source()}",
                [(sli.burn(w), f"{{{{model_name}}}} {w}") for w in BURN_WINDOWS],
                metrics=[slo_rules.pod_events(w) for w in BURN_WINDOWS] + [slo_rules.ERROR_BUDGET_RECORD],
                unit=TIMES, steps=_burn_steps(), decimals=2)


def _budget_stat() -> g.Panel:
    queries = [(Sli(per_model=False, objective=o).budget_left(), f"{slo_rules.OBJECTIVE_TITLE[o]} {{{{model_name}}}}")
               for o in slo_rules.OBJECTIVES]
    return stat("Error budget left (estimate)", BUDGET_TEXT + " Red: the budget is spent.", queries,
                metrics=[slo_rules.pod_bad_events(LONG_WINDOW), slo_rules.ERROR_BUDGET_RECORD], unit="percentunit",
                steps=[g.Threshold(RED, 0, 0.0), g.Threshold(GREEN, 1, 0.0)], decimals=1)


def _good_bad(objective: str) -> g.Panel:
    sli = Sli(per_model=False, objective=objective)
    title = slo_rules.OBJECTIVE_TITLE[objective]
    what = {"ttft": "first tokens", "itl": "token gaps", "availability": "finished requests"}[objective]
    return timeseries(f"{title}: good and bad events", f"{what.capitalize()} per second within and outside the "
                      f"objective ({SHORT_WINDOW} rates), for the selected targets.",
                      [(sli.good(SHORT_WINDOW), "{{model_name}} good"), (sli.bad(SHORT_WINDOW), "{{model_name}} bad")],
                      metrics=SLI_METRICS, unit=EVENTS_PER_S,
                      overrides=[{"matcher": {"id": "byFrameRefID", "options": ref},
                                  "properties": [{"id": "color", "value": {"mode": "fixed", "fixedColor": colour}}]}
                                 for ref, colour in (("A", GREEN), ("B", RED))])


def _objectives_row(lay: Layout) -> None:
    lay.row("Objectives (SLO)")
    lay.add_row([_attainment_stat(o) for o in slo_rules.OBJECTIVES], h=5)
    lay.add_row([*(_burn_stat(o) for o in slo_rules.OBJECTIVES), _budget_stat()], h=5)
    lay.add_row([_good_bad(o) for o in slo_rules.OBJECTIVES], h=7)


def _model_slo_table() -> g.Panel:
    """Per model and objective: attainment over the range, burn rates and the budget estimate."""
    sli = Sli(per_model=True)
    columns = {"attainment": "Attainment (range)", **{w: f"Burn {w}" for w in BURN_WINDOWS},
               "budget": f"Budget left (last {LONG_WINDOW} only)"}
    queries = [(sli.attainment(), ""), *((sli.burn(w), "") for w in BURN_WINDOWS), (sli.budget_left(), "")]
    model, ns = "__data.fields.model_name", "__data.fields.namespace"
    burn_cells = [("unit", TIMES), ("decimals", 2), ("custom.cellOptions", {"type": "color-background"}),
                  ("thresholds", {"mode": "absolute", "steps": [
                      {"color": t.color, "value": None if t.index == 0 else t.value} for t in _burn_steps()]})]
    return table("Objectives by model", "Each model's objectives (replicas summed): attainment over the dashboard "
                 f"range, burn rates ({', '.join(BURN_WINDOWS)}; 1 spends the budget exactly over {SLO_PERIOD_DAYS} "
                 f"days; {_burn_source()}) and the budget estimate. {BUDGET_TEXT} The model cell opens the overview.",
                 queries, columns=columns,
                 metrics=[slo_rules.model_events(SHORT_WINDOW), slo_rules.model_bad_events(SHORT_WINDOW),
                          *(slo_rules.model_burn(w) for w in BURN_WINDOWS)],
                 overrides=[
                     _by_name(columns["attainment"], ("unit", "percentunit"), ("decimals", 3)),
                     *(_by_name(columns[w], *burn_cells) for w in BURN_WINDOWS),
                     _by_name(columns["budget"], ("unit", "percentunit"), ("decimals", 1)),
                     _by_name("model_name", ("links", [_link("Overview of ${__data.fields.model_name}",
                                                            overview_url(model=model))])),
                     _by_name("namespace", ("links", [_link(
                         "Overview of ${__data.fields.model_name} in ${__data.fields.namespace}",
                         overview_url(model=model, namespace=ns))])),
                 ])


GENERATION_THROUGHPUT = diag("vllm_diag_throughput_tokens_per_second", 'kind="generation"')

