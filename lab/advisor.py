"""``python -m lab.advisor``: the advisor's pooled record over every validation half ever scored
(lab/advisor_record.py); with ``--manifest``, the real before/after pairs (lab/advisor_pairs.py); with
``--runs``/``--write``/``--live``, its four before/after cases against a real vLLM (lab/advisor_cases.py)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from lab import advisor_pairs
from lab.advisor_cases import CASES, checks, collect, score, table, write_docs
from tests.realvllm.engine import unavailable_reason, vllm_available


def main(argv: list[str] | None = None) -> int:
    """python -m lab.advisor [--runs DIR] [--reuse] [--write docs/data/advisor-kept-run.json]: exit 0 when every
    case meets the acceptance, 1 when one misses (the table says which), 2 without a real vLLM."""
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(prog="python -m lab.advisor",
                                     description="The advisor against a real vLLM: before/after runs per change.")
    parser.add_argument("--runs", help="folder for the captures (default: a temporary one)")
    parser.add_argument("--reuse", action="store_true", help="score captures already in --runs, run nothing")
    parser.add_argument("--write", metavar="FILE",
                        help="write the table as docs/advisor.md renders it: docs/data/advisor-kept-run.json")
    parser.add_argument("--manifest", metavar="FILE", help="score the real before/after pairs of this manifest "
                        "(lab/advisor_pairs.py) instead of the four cases")
    parser.add_argument("--split", default="validation",
                        help="with --manifest: the split(s) to score: dev, validation, validation-1 ... validation-7 "
                        "(spent halves), smoke, all, or a comma list (default validation)")
    parser.add_argument("--capture", metavar="PAIR", help="with --manifest: capture this pair, or every pair "
                        "of this split, on the real vLLM (all: every capture of the manifest not on disk yet)")
    parser.add_argument("--seconds", type=float, default=None, help="with --capture: captured seconds per run")
    parser.add_argument("--live", action="store_true", help="run the four cases on a real vLLM (a temporary folder)")
    args = parser.parse_args(argv)
    if not (args.manifest or args.runs or args.write or args.live or args.reuse):
        from lab import advisor_record, summary

        print(advisor_record.table(advisor_record.record((s, name) for s, _, name in summary.ADVISOR_HALVES)))
        return 0
    if args.manifest:
        if args.capture and not vllm_available():
            print(f"python -m lab.advisor: {unavailable_reason()}", file=sys.stderr)
            return 2
        return advisor_pairs.main(Path(args.manifest), args.split, args.capture, args.seconds)
    if args.reuse and not args.runs:
        parser.error("--reuse needs --runs DIR (the captures to score)")
    if not args.reuse and not vllm_available():
        print(f"python -m lab.advisor: {unavailable_reason()}", file=sys.stderr)
        return 2
    runs = Path(args.runs or tempfile.mkdtemp(prefix="advisor-validation-"))
    print(f"captures in {runs}", file=sys.stderr)
    if args.reuse:
        saved = runs / "timings.json"
        timings = json.loads(saved.read_text(encoding="utf-8")) if saved.exists() else {}
    else:
        timings = collect(runs)
    t1 = time.monotonic()
    scores = [score(case, runs) for case in CASES]
    timings["advisor"] = time.monotonic() - t1
    timings["total"] = timings.get("engines and runs", 0.0) + timings["advisor"]
    print(table(scores))
    print("\n".join(["", *map(checks, scores), ""]))
    print(json.dumps(timings, indent=1))
    if args.write:
        write_docs(scores, timings, Path(args.write))
    return 0 if all(s.passed for s in scores) else 1


if __name__ == "__main__":
    sys.exit(main())
