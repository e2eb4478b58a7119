"""Every fleet case through a real Prometheus and Alertmanager: ``python -m lab.fleet_pages``.

The suite's fleet replay (tests/e2e/test_fleet_pages.py) plays the cases that fit 36 simulated
minutes. This command plays all of them, the 3-minute burst included: the burst comes at minute
65, once the burn rates' hour holds history, so its replay is the longest (80 simulated minutes,
80 s of playback at 60x) and stays out of the suite's 15 minutes. It runs that module with every
case (``VLLM_DIAG_FLEET_ALL=1``) and prints the table docs/alerting.md quotes; the exit status is
pytest's (a case that misses its expectation fails it). Needs what the suite's Prometheus tests
need (``bash scripts/install-test-infra.sh``); about 4 minutes on 2 cores.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MODULE = REPO / "tests" / "e2e" / "test_fleet_pages.py"
TABLE = REPO / "test-artifacts" / "fleet-pages.md"


def main() -> int:
    # Imported here so the module imports nothing of the tests until it runs.
    sys.path.insert(0, str(REPO))
    from tests.e2e.replay import FLEET_ALL_ENV

    TABLE.unlink(missing_ok=True)
    env = {**os.environ, FLEET_ALL_ENV: "1"}
    code = subprocess.call([sys.executable, "-m", "pytest", str(MODULE), "-p", "no:cacheprovider", "-q"],
                           cwd=REPO, env=env)
    if TABLE.exists():
        print(TABLE.read_text(encoding="utf-8"), end="")
    else:
        print(f"no table written ({TABLE}): the fleet fixture did not get to play", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
