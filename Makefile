# The two commands of the quick start. Both set up ./.venv on first use.
.PHONY: demo test
demo:
	scripts/dev demo
test:
	scripts/dev test

# The image and the manifests of a release. The version is pyproject.toml's, the one place it is written;
# the tag defaults to it, the commit comes from git (with -dirty for uncommitted changes).
#   make image [IMAGE=registry/path] [TAG=x.y.z] [ENGINE=docker|podman|buildah] [BASE_IMAGE=...]
#   make release-manifests IMAGE=registry/path [TAG=x.y.z] [OUT=deploy/overlays/release]
.PHONY: image release-manifests
VERSION := $(shell sed -n 's/^version = "\(.*\)"$$/\1/p' pyproject.toml)
COMMIT := $(shell c=$$(git rev-parse --short=12 HEAD 2>/dev/null) && { git diff --quiet HEAD -- 2>/dev/null || c=$$c-dirty; echo $$c; })
IMAGE ?= ghcr.io/gpulens/gpulens
TAG ?= $(VERSION)
OUT ?= deploy/overlays/release
# The first engine that answers: docker or podman with a running engine (`info`), else buildah, which
# needs no daemon. BUILDAH_ISOLATION=chroot (the default here) builds without a container runtime.
ENGINE ?= $(shell if docker info >/dev/null 2>&1; then echo docker; \
	elif podman info >/dev/null 2>&1; then echo podman; \
	elif command -v buildah >/dev/null 2>&1; then echo buildah; fi)
BUILDAH_ISOLATION ?= chroot
comma := ,
# PIP_CERT (a CA bundle for a TLS-intercepting proxy) reaches pip as a build secret, never a layer.
image:
	@test -n "$(ENGINE)" || { echo "make image: no container engine (docker or podman with a running engine, or buildah)" >&2; exit 1; }
	$(ENGINE) build $(if $(filter buildah,$(ENGINE)),--isolation $(BUILDAH_ISOLATION) --layers) \
	  $(if $(PIP_CERT),--secret id=pip-cert$(comma)src=$(PIP_CERT)) \
	  $(if $(BASE_IMAGE),--build-arg BASE_IMAGE=$(BASE_IMAGE)) \
	  --build-arg GPULENS_VERSION=$(VERSION) --build-arg GPULENS_COMMIT=$(COMMIT) \
	  -t $(IMAGE):$(TAG) .
release-manifests:
	@test "$(origin IMAGE)" != file || { echo "make release-manifests: say where the image is: IMAGE=registry/path" >&2; exit 2; }
	scripts/release-manifests --image "$(IMAGE)" --tag "$(TAG)" --out "$(OUT)"
