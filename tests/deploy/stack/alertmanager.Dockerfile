# Stand-in for prom/alertmanager, used only by tests/deploy/test_compose_stack.py (through
# tests/deploy/stack/docker-compose.test.yml): no registry can be reached in the tests. It carries
# the files of the Debian package `prometheus-alertmanager` as installed on the test machine (packed
# by the test into package-files.tar) on the local debootstrap base, and mirrors the upstream image
# where the compose file relies on it: entrypoint /bin/alertmanager (Debian names the binary
# prometheus-alertmanager), user nobody, /alertmanager owned by nobody.
ARG BASE_IMAGE=vllm-diag-base:bookworm
FROM ${BASE_IMAGE}
ADD package-files.tar /
RUN ln -s prometheus-alertmanager /usr/bin/alertmanager \
    && mkdir -p /alertmanager /etc/alertmanager \
    && chown nobody:nogroup /alertmanager \
    && /bin/alertmanager --version
USER 65534:65534
WORKDIR /alertmanager
EXPOSE 9093
ENTRYPOINT ["/bin/alertmanager"]
CMD ["--config.file=/etc/alertmanager/alertmanager.yml", "--storage.path=/alertmanager"]
