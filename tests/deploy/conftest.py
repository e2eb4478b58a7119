"""Fixtures of the Docker tests: one private dockerd and one sidecar image per test session.

Session-scoped so that tests/deploy/test_image.py and tests/deploy/test_compose_stack.py share the
daemon, the base image and the sidecar build (the slow parts); a module that starts containers
removes its own at its end. See tests/deploy/dockerd.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.deploy.dockerd import (
    Docker,
    build_base_image,
    build_sidecar_image,
    private_dockerd,
    remove_image,
    served_wheelhouse,
    write_timings,
)

# Build and start-up timings of the Docker machinery, written to test-artifacts/docker-image-timings.json.
TIMINGS: dict[str, float | bool] = {}


@pytest.fixture(scope="session")
def docker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Docker]:
    root = Path(str(tmp_path_factory.mktemp("dockerd")))
    try:
        with private_dockerd(root, TIMINGS) as d:
            yield d
    finally:
        write_timings("docker-image-timings.json", TIMINGS)


@pytest.fixture(scope="session")
def base_image(docker: Docker) -> str:
    return build_base_image(docker, TIMINGS)


@pytest.fixture(scope="session")
def wheelhouse_url() -> Iterator[str]:
    with served_wheelhouse(TIMINGS) as url:
        yield url


@pytest.fixture(scope="session")
def image(docker: Docker, base_image: str, wheelhouse_url: str) -> Iterator[str]:
    """The sidecar image built from the repository's Dockerfile."""
    tag = build_sidecar_image(docker, base_image, wheelhouse_url, TIMINGS)
    try:
        yield tag
    finally:
        docker.remove_containers()
        remove_image(docker, tag)
