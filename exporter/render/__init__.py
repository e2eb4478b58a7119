"""Generated artefacts: Prometheus rules, runbooks, the Alertmanager example and Grafana dashboards.

Everything under ``alert_rules/``, ``dashboards/``, ``docs/runbooks/``,
``deploy/alertmanager/alertmanager.yml`` and the Kubernetes copies in ``deploy/kubernetes/``
(``prometheusrule.yaml``, ``grafana-dashboards.yaml``) is produced here from the catalog
(``exporter.catalog``) and the SLO defaults (``exporter.config.Slo``); edits go into the
generators, never into the generated files. ``vllm-diag render all --check`` renders in
memory and compares byte for byte, so CI notices a catalog change that was not re-rendered.

Modules: ``promql`` (the PromQL builder every generator writes queries with), ``slo``, ``rules``,
``runbooks``, ``dashboards`` and ``kubernetes`` (the generators), ``generate`` (the render/check
driver over all of them), ``lint`` (every queried series exists) and ``cli`` (``vllm-diag render``).
This package module imports none of them, so ``vllm-diag``'s start-up never loads a generator.
"""
