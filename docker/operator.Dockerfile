# The trainium operator: `trainium operator` (kopf) with its liveness and metrics endpoints.
# Build from the repository root: docker build -f docker/operator.Dockerfile -t trainium-operator .
# Pinned slim base: a patch-level tag, so rebuilds are reproducible until we bump it on purpose.
FROM python:3.11.14-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1

# Dependencies from the lock first (their own layer, cached across code changes): exactly the
# versions the tests ran with (scripts/operator-lock.py), --no-deps so pip resolves nothing new.
WORKDIR /src
COPY docker/operator-requirements.txt docker/
RUN pip install --no-cache-dir --no-deps -r docker/operator-requirements.txt

# Only what the wheel is built from (hatchling packs operator/ and trainer/, plus the CRD the
# operator validates specs with); tests, charts and docs stay out of the image. `pip check`
# fails the build if the lock misses something pyproject.toml asks for.
COPY pyproject.toml README.md ./
COPY crds/ crds/
COPY operator/ operator/
COPY trainer/ trainer/
RUN pip install --no-cache-dir --no-deps . \
    && pip check \
    && groupadd --system --gid 10001 trainium \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /tmp \
       --shell /usr/sbin/nologin trainium

# Numeric user, so runAsNonRoot can verify it without reading /etc/passwd. The chart mounts an
# emptyDir on /tmp (read-only root filesystem): HOME points there for anything that wants a home.
WORKDIR /tmp
USER 10001:10001
ENV HOME=/tmp \
    TRAINIUM_METRICS_PORT=9090

# 8080: kopf liveness (/healthz); 9090: Prometheus /metrics.
EXPOSE 8080 9090
ENTRYPOINT ["trainium", "operator"]
CMD ["--standalone", "--all-namespaces", "--liveness=http://0.0.0.0:8080/healthz"]
