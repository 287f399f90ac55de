#!/usr/bin/env bash
# `make image`: netkit's node image netkit:<version> in podman's local storage, built without any
# container registry, in two cached steps:
#   1. the base, base-<hash>.tar in the machine's cache (scripts/image-base.sh): a Debian root made
#      by mmdebstrap with deploy/image-packages.txt, netkit's Python dependencies (pip on this machine,
#      for the root's Python) and deploy/image-finish.sh's trims. Made again only when one of those
#      changes. It is kept outside the checkout ($NETKIT_IMAGE_CACHE, else ~/.cache/netkit-image, as
#      pip keeps its wheels), so a fresh clone (CI's) reuses it instead of spending minutes on it.
#   2. the image: the base plus the netkit package as bytecode (`podman build`, one layer), labelled
#      with the hash of every input; rebuilt only when that hash changes. It is tagged twice:
#      netkit:<version>, what deploy/ names (the last one built, from any checkout), and
#      netkit:<version>-<hash>, this checkout's own: what the tests run (`--tag` prints it), so a
#      changed checkout never runs a stale image and checkouts building at once never replace each
#      other's. The newest KEEP (3) such tags are kept, older ones removed.
# The build needs no container runtime (the RUN step uses chroot isolation), so it works alike on
# hosts whose crun refuses hybrid cgroups or whose root lacks CAP_SYS_RESOURCE and on ordinary ones.
set -euo pipefail
cd "$(dirname "$0")/.."

SUITE=bookworm
CACHE=${NETKIT_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/netkit-image}
PIP=${PIP:-.venv/bin/python -m pip}
VERSION=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' netkit/__init__.py)
TAG=${NETKIT_IMAGE:-netkit:$VERSION}

KEEP=3

die() { echo "netkit: error: make image: $*" >&2; exit 2; }
command -v podman >/dev/null || die "podman is not installed (apt-get install podman)"
command -v mmdebstrap >/dev/null || die "mmdebstrap is not installed (apt-get install mmdebstrap)"

hash_of() { sha256sum "$@" | sha256sum | cut -c1-16; }
base_inputs=(deploy/image-packages.txt deploy/image-finish.sh scripts/image-base.sh pyproject.toml)
base_hash=$(hash_of "${base_inputs[@]}")
mapfile -t sources < <(find netkit -name '*.py' -o -name py.typed | LC_ALL=C sort)
image_hash=$(hash_of "${base_inputs[@]}" "${sources[@]}")
OWN=${TAG%%:*}:$VERSION-$image_hash
if [ "${1:-}" = "--tag" ]; then
  echo "$OWN"
  exit 0
fi

mkdir -p "$CACHE"
exec 9>"$CACHE/lock"
flock 9  # one build at a time, from any checkout; the next finds its image up to date

if podman image exists "$OWN"; then
  podman tag "$OWN" "$TAG"
  echo "image: $OWN is up to date, tagged $TAG"
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
podman build --quiet --squash --isolation=chroot --network host -t "$OWN" -t "$TAG" "$ctx" >/dev/null
# older checkouts' tags beyond the newest KEEP, and so their images, unless a container still uses one
podman images --filter "reference=${TAG%%:*}:$VERSION-*" --format '{{.CreatedAt}}|{{.Repository}}:{{.Tag}}' |
  LC_ALL=C sort -r | tail -n +$((KEEP + 1)) | cut -d'|' -f2 |
  while read -r old; do podman image rm "$old" >/dev/null 2>&1 || true; done
podman images --filter dangling=true --filter "label=netkit.version" --quiet | xargs -r podman image rm >/dev/null 2>&1 || true
podman image inspect --format "image: $OWN (and $TAG) {{.Size}} bytes" "$OWN"
