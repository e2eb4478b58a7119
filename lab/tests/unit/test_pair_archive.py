"""The advisor pairs' run archives (lab/pair_archive.py): a packed run reads back as the folder it was."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from lab.pair_archive import archive_path, is_captured, main, pack, run_folders

REPO = Path(__file__).resolve().parents[3]


def _run(folder: Path, captures: int = 3) -> Path:
    folder.mkdir(parents=True)
    for index in range(captures):
        text = f"# scraped_at={1000 + index}\nvllm:num_requests_running{{model_name=\"m\"}} {index}\n"
        (folder / f"{folder.name}-{index:03d}.txt.gz").write_bytes(gzip.compress(text.encode(), mtime=0))
    (folder / "vllm-diag.yaml").write_text("targets: []\n", encoding="utf-8")
    (folder / "run.json").write_text('{"run": "r"}\n', encoding="utf-8")
    return folder


def test_a_packed_run_unpacks_to_its_captures_as_text(tmp_path: Path) -> None:
    folder = _run(tmp_path / "r1")
    assert main([str(folder)]) == 0
    assert not folder.exists() and is_captured(tmp_path, "r1")
    with run_folders(tmp_path, ["r1"]) as (unpacked,):
        names = sorted(p.name for p in unpacked.iterdir())
        assert names == ["r1-000.txt", "r1-001.txt", "r1-002.txt", "run.json", "vllm-diag.yaml"]
        assert (unpacked / "r1-002.txt").read_text().endswith("} 2\n")
    assert not unpacked.exists()  # unpacked only for the block


def test_packing_is_byte_reproducible_and_a_folder_is_read_in_place(tmp_path: Path) -> None:
    first = pack(_run(tmp_path / "a" / "r1")).read_bytes()
    second = pack(_run(tmp_path / "b" / "r1")).read_bytes()
    assert first == second
    with run_folders(tmp_path / "a", ["r1"]) as (folder,):
        assert folder == tmp_path / "a" / "r1"


def test_a_missing_run_is_named(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="run gone"), run_folders(tmp_path, ["gone"]):
        pass
    assert not is_captured(tmp_path, "gone")


def test_an_unfinished_run_is_left_alone(tmp_path: Path) -> None:
    folder = _run(tmp_path / "r1")
    (folder / "run.json").unlink()
    assert main([str(folder)]) == 0
    assert folder.is_dir() and not archive_path(tmp_path, "r1").exists()


def test_every_run_the_manifest_names_is_on_disk_but_a_half_fixed_ahead_of_its_capture() -> None:
    from lab.advisor_pairs import load_manifest
    from lab.summary import ADVISOR_HALVES

    captures, pairs = load_manifest(REPO / "lab/data/advisor-pairs/manifest.yaml")
    by_split: dict[str, set[str]] = {}
    for pair in pairs:
        by_split.setdefault(pair.split, set()).update((*pair.base, pair.after))
    missing = {split: sorted(r for r in runs if not is_captured(captures, r)) for split, runs in by_split.items()}
    # A half is fixed in the manifest before its capture: wholly absent then, never partly captured.
    partial = {split: gone for split, gone in missing.items() if gone and len(gone) < len(by_split[split])}
    assert not partial, f"halves partly captured: {partial}"
    scored = {split for split, _, _ in ADVISOR_HALVES}
    assert not [split for split in scored | {"dev"} if missing.get(split)], "a scored half's runs are missing"
    # Only the newest halves wait: every half fixed before a captured one is captured.
    waiting = [bool(missing[split]) for split in by_split]  # the manifest's order
    assert waiting == sorted(waiting), f"a half waits behind a later captured one: {missing}"
