#!/usr/bin/env bash
# The test command: installs the real components the tests use, then runs the whole suite.
# pytest's exit code 5 (no test collected) is a failure here.
set -uo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || bash scripts/install.sh
bash scripts/install-test-infra.sh || { echo "test infrastructure install failed" >&2; exit 1; }
# Generated artifacts must match their generators before anything else runs.
.venv/bin/vllm-diag render all --check || exit 1
# Lint and type gate (configured in pyproject.toml): the code passes them or nothing runs.
.venv/bin/ruff check . || exit 1
.venv/bin/mypy || exit 1
# The end of the output lists the slowest tests (the whole run has a 15-minute budget on 2 cores) and
# every skip and expected failure with its reason.
.venv/bin/python -m pytest -p no:cacheprovider --durations=15 -rfEsxX "$@"
code=$?
if [ "$code" -eq 5 ]; then
  echo "pytest collected no tests: failing" >&2
  exit 1
fi
exit "$code"
