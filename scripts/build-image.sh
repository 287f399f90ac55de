#!/usr/bin/env bash
# `make image`: netkit's node image netkit:<version> in podman's local storage, built without any
# container registry, in two cached steps:
#   1. the base, .cache/image/base-<hash>.tar: a Debian root made by mmdebstrap with
#      deploy/image-packages.txt, netkit's Python dependencies (pip on this machine, for the root's
#      Python) and deploy/image-finish.sh's trims. Made again only when one of those inputs changes.
#   2. the image: the base plus the netkit package as bytecode (`podman build`, one layer), labelled
#      with the hash of every input; rebuilt only when that hash changes.
# Podman on hosts with hybrid cgroups, without CAP_SYS_RESOURCE or without /lib/modules works as on
# an ordinary one: runc where it is installed, the caller's rlimits, chroot isolation for RUN steps.
set -euo pipefail
cd "$(dirname "$0")/.."

SUITE=bookworm
CACHE=.cache/image
PIP=${PIP:-.venv/bin/python -m pip}
VERSION=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' netkit/__init__.py)
TAG=${NETKIT_IMAGE:-netkit:$VERSION}

die() { echo "netkit: error: make image: $*" >&2; exit 2; }
command -v podman >/dev/null || die "podman is not installed (apt-get install podman)"
command -v mmdebstrap >/dev/null || die "mmdebstrap is not installed (apt-get install mmdebstrap)"

# The hook mmdebstrap runs on the finished Debian root ($1): netkit's Python dependencies are
# installed by this machine's pip (its configuration, its index) for the root's Python, as
# manylinux wheels; then the trims run inside the root.
if [ "${1:-}" = hook-deps ]; then
  root=$2
  py=$(chroot "$root" python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  chroot "$root" sh /tmp/image-finish.sh requirements /tmp >"$root/tmp/requirements.txt"
  # every manylinux tag the root's glibc satisfies (pip takes the platforms literally)
  glibc=$(chroot "$root" getconf GNU_LIBC_VERSION | sed 's/.*2\.//')
  platforms=()
  for minor in $(seq "$glibc" -1 5); do platforms+=(--platform "manylinux_2_${minor}_$(uname -m)"); done
  $PIP install -q --no-compile --target "$root/usr/local/lib/python$py/dist-packages" \
    --python-version "$py" --implementation cp "${platforms[@]}" \
    --only-binary=:all: -r "$root/tmp/requirements.txt"
  # the wheels' shared objects carry symbols nothing here reads (uvloop: 13.6 MB, 1.6 MB stripped)
  if command -v strip >/dev/null; then
    find "$root/usr/local/lib" -name '*.so*' -type f -exec strip --strip-unneeded {} +
  fi
  chroot "$root" sh /tmp/image-finish.sh trim
  rm -f "$root"/tmp/*
  exit 0
fi

mkdir -p "$CACHE"

hash_of() { sha256sum "$@" | sha256sum | cut -c1-16; }
base_inputs=(deploy/image-packages.txt deploy/image-finish.sh scripts/build-image.sh pyproject.toml)
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
  packages=$(grep -v -e '^#' -e '^$' deploy/image-packages.txt | paste -sd, -)
  mirrors=()
  # apt as this machine has it configured, when it runs the same Debian release
  if grep -qs "^VERSION_CODENAME=$SUITE$" /etc/os-release; then
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
      [ -s "$f" ] && mirrors+=("$f")
    done
  fi
  mmdebstrap --quiet --format=tar --variant=essential --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
    --include="$packages" \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/lib/x86_64-linux-gnu/gconv/*' \
    --customize-hook='copy-in deploy/image-finish.sh pyproject.toml /tmp' \
    --customize-hook="PIP='$PIP' scripts/build-image.sh hook-deps \"\$1\"" \
    "$SUITE" "$base.part" "${mirrors[@]}"
  mv "$base.part" "$base"
fi

# podman's options for this machine: runc where it is installed (crun refuses hybrid cgroups), the
# caller's own rlimits (podman's defaults need CAP_SYS_RESOURCE), chroot isolation for RUN steps
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
