# The testbed in a container, for `docker compose up` on a lab machine (docker-compose.yml).
# Installed exactly as the README installs it on a bare Debian 12 host: harness/install.sh
# (the Debian packages, then .venv with `pip install -e '.[test]'`). The container then runs
# the bare-host command, `.venv/bin/testbed campaign --quick`.
FROM python:3.11-slim-bookworm

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHON=/usr/local/bin/python3.11

WORKDIR /testbed
# The same script as the README's first command; it also installs Debian's python3 (a
# dependency of its packages), but the venv is built on this image's Python 3.11 (PYTHON).
# First with the install script and pyproject.toml alone (README.md is only read by the
# metadata: a placeholder), so that the Debian packages and the dependencies are a layer
# that a change of the sources leaves cached; then with the sources, which installs the
# project itself (the dependencies are there already).
COPY harness/install.sh harness/install.sh
COPY pyproject.toml pyproject.toml
RUN touch README.md && TESTBED_INSTALL_DEPS_ONLY=1 harness/install.sh \
    && rm -rf /var/lib/apt/lists/*
COPY . .
RUN harness/install.sh

# results/ is a bind mount from the host (docker-compose.yml); runs land there.
VOLUME ["/testbed/results"]
CMD [".venv/bin/testbed", "campaign", "--quick"]
