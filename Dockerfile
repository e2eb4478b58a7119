# vllm-diag sidecar image: a venv with the package and its dependencies on a slim Python base.
#
#   docker build -t vllm-diag .
#   docker run --rm -p 9863:9863 -e VLLM_DIAG_TARGETS='[{"name":"vllm-0","url":"http://vllm:8000/metrics"}]' vllm-diag
#
# Configuration: /etc/vllm-diag/config.yaml (mount your own over it; the default watches a vLLM in the
# same pod on 127.0.0.1:8000), then VLLM_DIAG_* environment variables (nested with "__"), which win.
# BASE_IMAGE must be Debian-like with python3 (>= 3.11) and python3-venv; CI builds from a local
# debootstrap image (scripts/build-base-image.sh) because it cannot pull.
ARG BASE_IMAGE=python:3.11-slim-bookworm

FROM ${BASE_IMAGE} AS build
# Optional package-index settings for the build stage only (a mirror, or an offline wheelhouse:
# CI passes PIP_NO_INDEX=1 and PIP_FIND_LINKS=http://127.0.0.1:PORT/ with --network host).
ARG PIP_INDEX_URL
ARG PIP_EXTRA_INDEX_URL
ARG PIP_FIND_LINKS
ARG PIP_NO_INDEX
ARG PIP_TRUSTED_HOST
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python3 -m venv /opt/vllm-diag
WORKDIR /src
COPY pyproject.toml README.md ./
COPY exporter ./exporter
RUN /opt/vllm-diag/bin/python -m pip install --no-compile ./ \
    && /opt/vllm-diag/bin/python -m pip uninstall --yes pip \
    && /opt/vllm-diag/bin/python -m compileall -q /opt/vllm-diag/lib

FROM ${BASE_IMAGE}
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="vllm-diag" \
      org.opencontainers.image.description="Layered performance diagnosis sidecar for vLLM" \
      org.opencontainers.image.source="https://github.com/vllm-diag/vllm-diag" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}"
RUN groupadd --system --gid 10001 vllm-diag \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin vllm-diag
COPY --from=build /opt/vllm-diag /opt/vllm-diag
COPY deploy/compose/vllm-diag.default.yaml /etc/vllm-diag/config.yaml
ENV PATH=/opt/vllm-diag/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 10001:10001
EXPOSE 9863
# Liveness of the HTTP server. The port follows VLLM_DIAG_LISTEN when set; if you move the port in
# the config file instead, set VLLM_DIAG_LISTEN too (or override this check).
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
  CMD ["python3", "-c", "import os, urllib.request; port = os.environ.get('VLLM_DIAG_LISTEN', ':9863').rpartition(':')[2]; urllib.request.urlopen(f'http://127.0.0.1:{port}/healthz', timeout=4)"]
ENTRYPOINT ["vllm-diag"]
CMD ["serve", "--config", "/etc/vllm-diag/config.yaml"]
