"""The one source of truth: vLLM metric names, thresholds, symptoms and causes.

The sidecar, the alert-rule templates and the dashboard builders only read from here.
"""
