"""The reader interface and the data root every reader takes (for tests on fixture trees)."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol


class NoData(Exception):
    """The source does not exist here (no such process, no cgroup controller, no PSI)."""


class Reader(Protocol):
    name: str

    def read(self) -> dict[str, float]:
        """Cumulative counters; raises NoData when the feature is absent."""
        ...


def read_text(path: Path) -> str:
    try:
        return path.read_text()
    except (FileNotFoundError, ProcessLookupError, NotADirectoryError) as exc:
        raise NoData(str(exc)) from None
    except PermissionError as exc:
        raise NoData(f"permission denied: {path}") from exc
