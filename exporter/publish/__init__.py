"""Renderers of the published state: Prometheus collector, JSON, HTML, CLI text."""
