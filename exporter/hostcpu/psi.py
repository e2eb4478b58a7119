"""CPU pressure stall information: the cumulative ``some total=`` microseconds of a PSI file."""

from __future__ import annotations

from pathlib import Path

from exporter.hostcpu.base import NoData, read_text


class PsiReader:
    name = "psi"

    def __init__(self, path: Path = Path("/proc/pressure/cpu")) -> None:
        self.path = path

    def read(self) -> dict[str, float]:
        for line in read_text(self.path).splitlines():
            if line.startswith("some "):
                for field in line.split()[1:]:
                    key, _, value = field.partition("=")
                    if key == "total":
                        return {"some_us": float(value)}
        raise NoData(f"{self.path} has no 'some total=' line")
