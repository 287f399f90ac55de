#!/usr/bin/env bash
# `make image`: netkit's node image netkit:<version> in podman's local storage, built without any
# container registry, in two cached steps:
#   1. the base, base-<hash>.tar in the machine's cache (scripts/image-base.sh): a Debian root made
#      by mmdebstrap with deploy/image-packages.txt, netkit's Python dependencies (pip on this machine,
#      for the root's Python) and deploy/image-finish.sh's trims. Made again only when one of those
#      changes. It is kept outside the checkout ($NETKIT_IMAGE_CACHE, else ~/.cache/netkit-image, as
#      pip keeps its wheels), so a fresh clone (CI's) reuses it instead of spending minutes on it.
#   2. the image: the base plus the netkit package as bytecode (`podman build`, one layer), labelled
#      with the hash of every input; rebuilt only when that hash changes.
# The build needs no container runtime (the RUN step uses chroot isolation), so it works alike on
# hosts whose crun refuses hybrid cgroups or whose root lacks CAP_SYS_RESOURCE and on ordinary ones.
set -euo pipefail
cd "$(dirname "$0")/.."

SUITE=bookworm
CACHE=${NETKIT_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/netkit-image}
PIP=${PIP:-.venv/bin/python -m pip}
VERSION=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' netkit/__init__.py)
TAG=${NETKIT_IMAGE:-netkit:$VERSION}

die() { echo "netkit: error: make image: $*" >&2; exit 2; }
command -v podman >/dev/null || die "podman is not installed (apt-get install podman)"
command -v mmdebstrap >/dev/null || die "mmdebstrap is not installed (apt-get install mmdebstrap)"

mkdir -p "$CACHE"
exec 9>"$CACHE/lock"
flock 9  # one build at a time, from any checkout (the tag is the machine's); the next finds it up to date

hash_of() { sha256sum "$@" | sha256sum | cut -c1-16; }
base_inputs=(deploy/image-packages.txt deploy/image-finish.sh scripts/image-base.sh pyproject.toml)
base_hash=$(hash_of "${base_inputs[@]}")
mapfile -t sources < <(find netkit -name '*.py' -o -name py.typed | LC_ALL=C sort)
image_hash=$(hash_of "${base_inputs[@]}" "${sources[@]}")

have=$(podman image inspect --format '{{index .Labels "netkit.inputs"}}' "$TAG" 2>/dev/null || true)
if [ "$have" = "$image_hash" ]; then
  echo "image: $TAG is up to date ($image_hash)"
  exit 0
fi

base=$CACHE/base-$base_hash.tar
if [ ! -f "$base" ]; then
  echo "image: making the Debian root ($SUITE, mmdebstrap): a few minutes"
  rm -f "$CACHE"/base-*.tar
  PIP=$PIP scripts/image-base.sh "$SUITE" "$base.part"
  mv "$base.part" "$base"
fi

# the RUN step with chroot isolation: no OCI runtime, so neither crun's refusal of hybrid cgroups
# nor the rlimits podman sets (they need CAP_SYS_RESOURCE) come into it
echo "image: building $TAG"
ctx=$(mktemp -d "$CACHE/context.XXXXXX")
trap 'rm -rf "$ctx"' EXIT
ln "$base" "$ctx/base.tar" 2>/dev/null || cp "$base" "$ctx/base.tar"
cp -r netkit "$ctx/netkit"
find "$ctx/netkit" -name __pycache__ -type d -prune -exec rm -rf {} +
cp deploy/image-finish.sh "$ctx/"
cat >"$ctx/Containerfile" <<EOF
FROM scratch
ADD base.tar /
COPY image-finish.sh /tmp/netkit-src/
COPY netkit /tmp/netkit-src/netkit
RUN sh /tmp/netkit-src/image-finish.sh netkit /tmp/netkit-src && rm -rf /tmp/netkit-src
LABEL netkit.inputs=$image_hash netkit.version=$VERSION
ENTRYPOINT ["netkit"]
EOF
old=$(podman image inspect --format '{{.Id}}' "$TAG" 2>/dev/null || true)
podman build --quiet --squash --isolation=chroot --network host -t "$TAG" "$ctx" >/dev/null
# the image this one replaced, unless a container still uses it
if [ -n "$old" ] && [ "$old" != "$(podman image inspect --format '{{.Id}}' "$TAG")" ]; then
  podman image rm "$old" >/dev/null 2>&1 || true
fi
podman image inspect --format "image: $TAG {{.Size}} bytes" "$TAG"
