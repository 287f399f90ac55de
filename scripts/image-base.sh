#!/usr/bin/env bash
# The base of netkit's node image (scripts/build-image.sh runs it): a Debian root as a tarball.
#   scripts/image-base.sh SUITE OUT.tar
# mmdebstrap installs deploy/image-packages.txt (essential variant, merged /usr without the usrmerge
# package, no docs, man pages, locales or gconv), using apt's sources as this machine has them when
# it runs the same release; then its hook installs netkit's Python dependencies and trims the root.
set -euo pipefail
cd "$(dirname "$0")/.."
PIP=${PIP:-.venv/bin/python -m pip}

# The hook mmdebstrap runs on the finished Debian root ($1): netkit's Python dependencies are
# installed by this machine's pip (its configuration, its index) for the root's Python, as
# manylinux wheels; then the trims run inside the root.
if [ "${1:-}" = hook-deps ]; then
  root=${2:-}
  # the hook installs, strips and deletes below $root: never let an empty or wrong one reach the host
  if [ -z "$root" ] || [ "$root" = / ] || [ ! -d "$root/etc" ]; then
    echo "netkit: error: image-base.sh hook-deps: '$root' is not a Debian root" >&2
    exit 2
  fi
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

# mmdebstrap 1.3.5 (bookworm), as root with --format=tar, empties the HOST's /var/lib/apt/lists and
# /var/cache/apt on its way out (measured: 9 entries before, 3 after), after which apt-cache and
# apt-get download (the VM build) find nothing until an apt-get update. So it runs in a mount
# namespace of its own where both are empty tmpfs: it needs neither, and the host keeps its own.
if [ -z "${NETKIT_IMAGE_BASE_UNSHARED:-}" ]; then
  exec env NETKIT_IMAGE_BASE_UNSHARED=1 unshare --mount --propagation private sh -c \
    'mount -t tmpfs tmpfs /var/lib/apt/lists && mount -t tmpfs tmpfs /var/cache/apt && exec "$0" "$@"' \
    "$0" "$@"
fi

suite=$1
out=$2
packages=$(grep -v -e '^#' -e '^$' deploy/image-packages.txt | paste -sd, -)
mirrors=()
if grep -qs "^VERSION_CODENAME=$suite$" /etc/os-release; then
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [ -s "$f" ] && mirrors+=("$f")
  done
fi
mmdebstrap --quiet --format=tar --variant=essential --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
  --include="$packages" \
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
  --dpkgopt='path-exclude=/usr/lib/*-linux-gnu/gconv/*' \
  --customize-hook='copy-in deploy/image-finish.sh pyproject.toml /tmp' \
  --customize-hook="PIP='$PIP' scripts/image-base.sh hook-deps \"\$1\"" \
  "$suite" "$out" "${mirrors[@]}"
