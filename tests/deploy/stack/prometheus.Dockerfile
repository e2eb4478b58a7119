# Stand-in for prom/prometheus, used only by tests/deploy/test_compose_stack.py (through
# tests/deploy/stack/docker-compose.test.yml): no registry can be reached in the tests. It carries
# the files of the Debian package `prometheus` as installed on the test machine (packed by the test
# into package-files.tar) on the local debootstrap base, and mirrors the upstream image where the
# compose file relies on it: entrypoint /bin/prometheus, user nobody (65534), /prometheus owned by nobody
# (a fresh named volume takes that owner), config at /etc/prometheus/prometheus.yml.
ARG BASE_IMAGE=vllm-diag-base:bookworm
FROM ${BASE_IMAGE}
ADD package-files.tar /
RUN mkdir -p /prometheus /etc/prometheus \
    && chown nobody:nogroup /prometheus \
    && /bin/prometheus --version
USER 65534:65534
WORKDIR /prometheus
EXPOSE 9090
ENTRYPOINT ["/bin/prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]
