# The gpulens image that every workload in deploy/ runs: ENTRYPOINT gpulens, the sub-command as args.
# Build it with `make image` (docker, podman or buildah; tag, version and commit from pyproject.toml and git).
#
# BASE_IMAGE is any image with python3 >= 3.11 and its venv module (the official slim image by default;
# the image test builds on a Debian root file system made with mmdebstrap). Both stages use the same base,
# so the virtual environment built in the first stages runs unchanged in the last.
ARG BASE_IMAGE=python:3.11-slim

# The dependencies of pyproject.toml, alone: a new version or description leaves them, and the next stage, unchanged.
FROM ${BASE_IMAGE} AS requirements
COPY pyproject.toml /src/
RUN python3 -c 'import tomllib; print("\n".join(tomllib.load(open("/src/pyproject.toml", "rb"))["project"]["dependencies"]))' \
      > /requirements.txt

# The dependencies into the virtual environment /opt/gpulens: the large layer of the image, reused until
# they change. A CA bundle for a TLS-intercepting proxy may be passed as the build secret pip-cert; it
# never enters a layer. /opt/gpulens-app, where the package itself goes, is put on the path by a .pth
# file, so a change of the source rebuilds a layer of megabytes, not this one.
FROM ${BASE_IMAGE} AS deps
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
COPY --from=requirements /requirements.txt /tmp/requirements.txt
RUN --mount=type=secret,id=pip-cert,required=false \
    if [ -s /run/secrets/pip-cert ]; then export PIP_CERT=/run/secrets/pip-cert; fi \
 && python3 -m venv /opt/build \
 && /opt/build/bin/pip install --quiet "setuptools>=77" \
 && python3 -m venv --without-pip /opt/gpulens \
 && /opt/build/bin/pip --python /opt/gpulens/bin/python install --quiet -r /tmp/requirements.txt \
 && echo /opt/gpulens-app > "$(/opt/gpulens/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/gpulens-app.pth"

FROM deps AS build
WORKDIR /src
# The package, built into a wheel (the commit baked in from GPULENS_COMMIT: the context has no .git).
COPY . .
ARG GPULENS_COMMIT=""
RUN GPULENS_COMMIT="${GPULENS_COMMIT}" /opt/build/bin/pip wheel --quiet --no-deps --no-build-isolation -w /wheels . \
 && /opt/build/bin/pip --python /opt/gpulens/bin/python install --quiet --no-deps --target /opt/gpulens-app \
      /wheels/gpulens-*.whl

FROM ${BASE_IMAGE}
# UID/GID 65532, as the manifests run it; its home is a volume there (the root file system is read-only).
RUN echo 'gpulens:x:65532:65532:gpulens:/home/gpulens:/usr/sbin/nologin' >> /etc/passwd \
 && echo 'gpulens:x:65532:' >> /etc/group \
 && mkdir -p /home/gpulens /data \
 && chown 65532:65532 /home/gpulens /data
# Only the virtual environment and the package travel: no pip, setuptools, wheels or caches of the build.
COPY --from=deps /opt/gpulens /opt/gpulens
COPY --from=build /opt/gpulens-app /opt/gpulens-app
ENV PATH=/opt/gpulens-app/bin:/opt/gpulens/bin:$PATH HOME=/home/gpulens PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
USER 65532:65532
WORKDIR /data
ENTRYPOINT ["gpulens"]
CMD ["--help"]
# Last, so that a new commit changes no layer above.
ARG GPULENS_VERSION=unknown
ARG GPULENS_COMMIT=""
ARG GPULENS_SOURCE=https://github.com/gpulens/gpulens
LABEL org.opencontainers.image.title="gpulens" \
      org.opencontainers.image.description="GPU visibility, idle capacity, chargeback and quota feedback for shared Kubernetes GPUs" \
      org.opencontainers.image.version="${GPULENS_VERSION}" \
      org.opencontainers.image.revision="${GPULENS_COMMIT}" \
      org.opencontainers.image.source="${GPULENS_SOURCE}" \
      org.opencontainers.image.licenses="Apache-2.0"
