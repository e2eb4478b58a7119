"""vllm-diag's lab: experiments whose outcome is a table, not a test (``python -m lab.<name>``).

The product (``exporter/``) never imports from here.
"""
