# The controller image: `hybrid-scaler run` (kopf) on Python 3.11, as a non-root
# user, ready for a read-only root filesystem (the chart mounts /tmp).
# Build from the repository root:  docker build -t hybrid-scaler:0.1.0 .

FROM python:3.11-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
WORKDIR /src
# Only what the wheel needs; tests, e2e, the Java plugin and the chart stay out.
COPY pyproject.toml README.md ./
COPY policies ./policies
COPY packer ./packer
COPY controller ./controller
COPY simulator ./simulator
RUN /opt/venv/bin/pip install .

FROM python:3.11-slim-bookworm
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
