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
COPY . .
# The same script as the README's first command; it also installs Debian's python3 (a
# dependency of its packages), but the venv is built on this image's Python 3.11 (PYTHON).
RUN harness/install.sh && rm -rf /var/lib/apt/lists/*

# results/ is a bind mount from the host (docker-compose.yml); runs land there.
VOLUME ["/testbed/results"]
CMD [".venv/bin/testbed", "campaign", "--quick"]
