#!/usr/bin/env bash
# Install vllm-diag into ./.venv (Python 3.11+). Idempotent; safe on a fresh machine.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
.venv/bin/python -m pip install --quiet -e '.[test]'
echo "vllm-diag installed: $(.venv/bin/vllm-diag --version)"
