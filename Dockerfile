# The gpulens image that every workload in deploy/ runs: ENTRYPOINT gpulens, the sub-command as args.
# Build it with `make image` (docker, podman or buildah; tag, version and commit from pyproject.toml and git).
#
# BASE_IMAGE is any image with python3 >= 3.11 and its venv module (the official slim image by default;
# the image test builds on a Debian root file system made with mmdebstrap). Both stages use the same base,
# so the virtual environment built in the first runs unchanged in the second.
ARG BASE_IMAGE=python:3.11-slim

FROM ${BASE_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
# The dependencies first, from pyproject.toml alone, so this layer is reused until they change. A CA
# bundle for a TLS-intercepting proxy may be passed as the build secret pip-cert; it never enters a layer.
COPY pyproject.toml ./
RUN --mount=type=secret,id=pip-cert,required=false \
    if [ -s /run/secrets/pip-cert ]; then export PIP_CERT=/run/secrets/pip-cert; fi \
 && python3 -m venv /opt/build \
 && /opt/build/bin/pip install --quiet "setuptools>=77" \
 && python3 -m venv --without-pip /opt/gpulens \
 && python3 -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))' \
      > /tmp/requirements.txt \
 && /opt/build/bin/pip --python /opt/gpulens/bin/python install --quiet -r /tmp/requirements.txt
# Then the package, built into a wheel (the commit baked in from GPULENS_COMMIT: the context has no .git).
COPY . .
ARG GPULENS_COMMIT=""
RUN GPULENS_COMMIT="${GPULENS_COMMIT}" /opt/build/bin/pip wheel --quiet --no-deps --no-build-isolation -w /wheels . \
 && /opt/build/bin/pip --python /opt/gpulens/bin/python install --quiet --no-deps /wheels/gpulens-*.whl

FROM ${BASE_IMAGE}
ARG GPULENS_VERSION=unknown
ARG GPULENS_COMMIT=""
ARG GPULENS_SOURCE=https://github.com/gpulens/gpulens
LABEL org.opencontainers.image.title="gpulens" \
      org.opencontainers.image.description="GPU visibility, idle capacity, chargeback and quota feedback for shared Kubernetes GPUs" \
      org.opencontainers.image.version="${GPULENS_VERSION}" \
      org.opencontainers.image.revision="${GPULENS_COMMIT}" \
      org.opencontainers.image.source="${GPULENS_SOURCE}" \
      org.opencontainers.image.licenses="Apache-2.0"
# UID/GID 65532, as the manifests run it; its home is a volume there (the root file system is read-only).
RUN echo 'gpulens:x:65532:65532:gpulens:/home/gpulens:/usr/sbin/nologin' >> /etc/passwd \
 && echo 'gpulens:x:65532:' >> /etc/group \
 && mkdir -p /home/gpulens /data \
 && chown 65532:65532 /home/gpulens /data
# Only the virtual environment travels: no pip, setuptools, wheels or caches of the build stage.
COPY --from=build /opt/gpulens /opt/gpulens
ENV PATH=/opt/gpulens/bin:$PATH HOME=/home/gpulens PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
USER 65532:65532
WORKDIR /data
ENTRYPOINT ["gpulens"]
CMD ["--help"]
