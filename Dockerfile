# The controller image: `hybrid-scaler run` (kopf) on Python 3.11, as a non-root
# user, ready for a read-only root filesystem (the chart mounts /tmp).
# Build from the repository root:  docker build -t hybrid-scaler:0.1.0 .
# Without a registry, e2e/scripts/image.sh builds this same file with podman:
# BASE is then a Debian bookworm made by debootstrap (Debian's python3 3.11), and
# PIP_OPTS points pip at a local wheelhouse ("--no-index --find-links /wheels").
ARG BASE=python:3.11-slim-bookworm

FROM ${BASE} AS build
ARG PIP_OPTS=""
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python3 -m venv /opt/venv
WORKDIR /src
# Only what the wheel needs; tests, e2e, the Java plugin and the chart stay out.
COPY pyproject.toml README.md ./
COPY policies ./policies
COPY packer ./packer
COPY controller ./controller
COPY simulator ./simulator
# PIP_OPTS is unquoted on purpose: it holds several options, or none.
RUN /opt/venv/bin/pip install $PIP_OPTS .

FROM ${BASE}
# The virtualenv is self-contained: no compiler or pip cache reaches this stage.
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp \
    MPLCONFIGDIR=/tmp/matplotlib
# Numeric, so that Kubernetes can verify runAsNonRoot without a passwd lookup.
USER 10001:10001
# 8080: kopf's liveness probe, 9464: the controller's /metrics (chart defaults).
EXPOSE 8080 9464
ENTRYPOINT ["hybrid-scaler"]
CMD ["run"]
