"""vllm-diag: layered performance diagnosis for vLLM, from its own /metrics."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("vllm-diag-exporter")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+source"

__all__ = ["__version__"]
