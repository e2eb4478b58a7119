"""One xz archive per captured run of the advisor pairs (``lab/data/advisor-pairs/<run>.tar.xz``).

A run is about twenty captures of one engine a few seconds apart. Compressed together they take a tenth
of what gzip takes one file at a time, and 4 KB disk blocks stop counting a third of the clone. Readers
get a folder: a run still stored as a folder (a capture just taken) is read in place, an archived one is
unpacked into a temporary folder for as long as it is read.

    python -m lab.pair_archive lab/data/advisor-pairs/RUN ...   # pack folders, check, then remove them
"""

from __future__ import annotations

import argparse
import gzip
import io
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ARCHIVE_SUFFIX = ".tar.xz"


def archive_path(captures: Path, run: str) -> Path:
    return captures / f"{run}{ARCHIVE_SUFFIX}"


def is_captured(captures: Path, run: str) -> bool:
    """A run on disk: a folder with its run.json (written last), or its archive."""
    return (captures / run / "run.json").exists() or archive_path(captures, run).exists()


@contextmanager
def run_folders(captures: Path, runs: list[str]) -> Iterator[list[Path]]:
    """A folder per run, in order; archived runs are unpacked for the duration of the block."""
    with tempfile.TemporaryDirectory(prefix="advisor-pairs-") as tmp:
        folders = []
        for run in runs:
            if (captures / run).is_dir():
                folders.append(captures / run)
                continue
            archive = archive_path(captures, run)
            if not archive.exists():
                raise FileNotFoundError(f"run {run}: neither {captures / run}/ nor {archive.name} in {captures}")
            with tarfile.open(archive, "r:xz") as tar:
                tar.extractall(tmp, filter="data")
            folders.append(Path(tmp) / run)
        yield folders


def _contents(folder: Path) -> dict[str, bytes]:
    """A run folder's files as the archive stores them: gzip'd captures as their text (xz compresses
    twenty similar texts together far better than twenty gzip streams)."""
    out = {}
    for path in sorted(folder.iterdir()):
        if not path.is_file():
            raise ValueError(f"{path}: a run folder holds only files")
        data = path.read_bytes()
        if path.name.endswith(".txt.gz"):
            out[f"{folder.name}/{path.name[:-3]}"] = gzip.decompress(data)
        else:
            out[f"{folder.name}/{path.name}"] = data
    return out


def pack(folder: Path) -> Path:
    """Write ``<folder>.tar.xz`` byte-reproducibly (sorted names, no owners, no times) and check it
    unpacks to the folder's contents; the folder itself is left for the caller to remove."""
    contents = _contents(folder)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:xz", preset=9) as tar:
        for name, data in contents.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    buffer.seek(0)
    with tarfile.open(fileobj=buffer, mode="r:xz") as tar:
        unpacked = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]
    if unpacked != contents:
        raise RuntimeError(f"{folder}: the archive does not unpack to the folder's contents")
    target = archive_path(folder.parent, folder.name)
    target.write_bytes(buffer.getvalue())
    return target


def pack_and_remove(folder: Path) -> Path:
    """Pack a finished run (see ``pack``), then remove its folder: the archive is the run from now on."""
    target = pack(folder)
    for path in folder.iterdir():
        path.unlink()
    folder.rmdir()
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.pair_archive", description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=Path, help="run folders to pack (removed once checked)")
    parser.add_argument("--keep", action="store_true", help="keep the folders after packing")
    args = parser.parse_args(argv)
    for folder in args.folders:
        if not (folder / "run.json").exists():
            print(f"{folder}: no run.json, not a finished run; left alone", file=sys.stderr)
            continue
        target = pack(folder) if args.keep else pack_and_remove(folder)
        print(f"{target} {target.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
