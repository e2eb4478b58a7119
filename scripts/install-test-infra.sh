#!/usr/bin/env bash
# Everything the full test suite talks to for real: Prometheus, VictoriaMetrics, Alertmanager, promtool,
# headless Chromium (Debian packages) and a real vLLM on the CPU (its own cached venv).
# Idempotent: each part is skipped when already present.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v prometheus >/dev/null 2>&1 || need_apt+=(prometheus)
command -v prometheus-alertmanager >/dev/null 2>&1 || need_apt+=(prometheus-alertmanager)
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
command -v dockerd >/dev/null 2>&1 || need_apt+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || need_apt+=(debootstrap)
command -v docker-compose >/dev/null 2>&1 || need_apt+=(docker-compose)
command -v openssl >/dev/null 2>&1 || need_apt+=(openssl)
command -v victoria-metrics >/dev/null 2>&1 || need_apt+=(victoria-metrics)
if [ "${#need_apt[@]}" -gt 0 ]; then
  # Debian's maintainer scripts would start these services on 0.0.0.0: forbid that first.
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
  fi
  echo "installing Debian packages: ${need_apt[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

if [ "${VLLM_DIAG_SKIP_REAL_VLLM:-0}" != "1" ]; then
  bash tests/realvllm/install.sh
fi
