"""Renderers of the published state: the /metrics text, JSON, HTML, CLI text."""
