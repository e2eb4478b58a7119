"""vllm-diag benchmarks: every figure next to a baseline measured in the same run, as a ratio.

Run ``.venv/bin/python -m lab [--quick]``; see ``lab/README.md``.
"""
