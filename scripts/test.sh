#!/usr/bin/env bash
# The test command: installs the real components the tests use, then runs the whole suite.
# pytest's exit code 5 (no test collected) is a failure here.
#
# Without arguments the suite runs in three lanes (tests/conftest.py's LANES, marker expressions):
#   waiting   docker, Prometheus/Alertmanager playback, Chromium, live servers: mostly waits;
#   cpu       the fast tier and the slow tests of deterministic CPU work, beside `waiting` at nice 10
#             (the priority of `waiting`'s background replays: the two share what the waiting tests
#             leave, so neither ends long after the other), in two pytest-xdist workers (its output
#             follows `waiting`'s);
#   realvllm  the real vLLM: its engines start beside the other lanes, its tests run alone after
#             them (latencies and CPU scores are what it measures).
# With arguments, one plain pytest run with them (for instance a file, or -m "not slow").
set -uo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || bash scripts/install.sh
bash scripts/install-test-infra.sh || { echo "test infrastructure install failed" >&2; exit 1; }
# Generated artifacts must match their generators before anything else runs.
.venv/bin/vllm-diag render all --check || exit 1
# Lint and type gate (configured in pyproject.toml): the code passes them or nothing runs.
.venv/bin/ruff check . || exit 1
.venv/bin/mypy || exit 1

PYTEST=(.venv/bin/python -m pytest -p no:cacheprovider -rfEsxX)

# pytest's exit code, with 5 (nothing collected) made a failure.
checked() {
  if [ "$1" -eq 5 ]; then
    echo "pytest collected no tests ($2): failing" >&2
    echo 1
  else
    echo "$1"
  fi
}

if [ "$#" -gt 0 ]; then
  "${PYTEST[@]}" --durations=15 "$@"
  exit "$(checked $? "$*")"
fi

lane() { .venv/bin/python -c "from tests.conftest import LANES; print(LANES['$1'])"; }
work=$(mktemp -d "${TMPDIR:-/tmp}/vllm-diag-tests.XXXXXX")
started=$(date +%s)
# Each lane has its own base temporary directory: pytest sessions at once must not prune each other's.
# The realvllm lane starts now at the lowest priority, starts its engines and waits for $work/go.
start_after=$(.venv/bin/python -c "from tests.realvllm.conftest import START_AFTER_ENV; print(START_AFTER_ENV)")
env "$start_after=$work/go" nice -n 19 "${PYTEST[@]}" --durations=10 --basetemp="$work/realvllm" \
  -m "$(lane realvllm)" >"$work/realvllm.log" 2>&1 &
realvllm_pid=$!
# Two workers, a file's tests on one of them (module fixtures are set up once): when the waiting lane
# idles, the CPU lane has both cores.
nice -n 10 "${PYTEST[@]}" --durations=10 --basetemp="$work/cpu" -n 2 --dist loadfile -m "$(lane cpu)" \
  >"$work/cpu.log" 2>&1 &
cpu_pid=$!
# Interrupted: the background lanes get SIGINT, so their fixtures stop what they started.
trap 'kill -INT "$cpu_pid" "$realvllm_pid" 2>/dev/null; touch "$work/go"' INT TERM
"${PYTEST[@]}" --durations=10 --basetemp="$work/waiting" -m "$(lane waiting)"
waiting=$(checked $? waiting)
wait "$cpu_pid"
cpu=$(checked $? cpu)
echo
echo "=== lane cpu (ran beside lane waiting) ==="
cat "$work/cpu.log"
parallel_done=$(date +%s)
touch "$work/go"
wait "$realvllm_pid"
realvllm=$(checked $? realvllm)
finished=$(date +%s)
echo
echo "=== lane realvllm (its engines started beside the other lanes; its tests ran alone after them) ==="
cat "$work/realvllm.log"
echo
echo "pytest wall time: $((finished - started)) s (lanes waiting + cpu side by side $((parallel_done - started)) s," \
     "then realvllm $((finished - parallel_done)) s); exit codes waiting=$waiting cpu=$cpu realvllm=$realvllm"
rm -rf "$work"
[ "$waiting" -eq 0 ] && [ "$cpu" -eq 0 ] && [ "$realvllm" -eq 0 ]
