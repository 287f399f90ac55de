#!/bin/sh
# Finishes netkit's node image inside its root, as root. Both builds run it: `make image`
# (scripts/build-image.sh, in the Debian root mmdebstrap made) and deploy/Containerfile (RUN steps).
#   image-finish.sh requirements SRC   prints the Python packages SRC/pyproject.toml depends on
#   image-finish.sh trim               once they are installed: bytecode only, no stdlib tests, no perl,
#                                      no pip/setuptools, no docs, locales or gconv
#   image-finish.sh netkit SRC         the netkit package from SRC/netkit as bytecode, and `netkit`
set -eu
what=$1
src=${2:-}
NETKIT_DIR=/usr/lib/python3/dist-packages/netkit

# Compile to legacy .pyc beside each source, then drop the sources: Python imports the bytecode
# alone (tracebacks show no source lines). -j0: one worker per CPU.
bytecode_only() {
  python3 -m compileall -q -b -j0 "$@" >/dev/null
  find "$@" -name '*.py' -delete
  find "$@" -name __pycache__ -type d -prune -exec rm -rf {} +
}

requirements() {
  python3 -c 'import sys, tomllib; print("\n".join(tomllib.load(open(sys.argv[1], "rb"))["project"]["dependencies"]))' \
    "$src/pyproject.toml"
}

trim() {
  py=$(python3 -c 'import sys; print(f"python{sys.version_info[0]}.{sys.version_info[1]}")')
  rm -rf "/usr/lib/$py/test" "/usr/lib/$py/idlelib" "/usr/lib/$py/tkinter" "/usr/lib/$py/turtledemo" \
    "/usr/lib/$py/lib2to3" "/usr/lib/$py/ensurepip" "/usr/lib/$py/pydoc_data" "/usr/lib/$py/unittest/test" \
    /usr/local/bin/* \
    /usr/local/lib/"$py"/dist-packages/pip* /usr/local/lib/"$py"/dist-packages/setuptools* \
    /usr/local/lib/"$py"/dist-packages/_distutils_hack /usr/local/lib/"$py"/dist-packages/pkg_resources \
    /usr/local/lib/"$py"/dist-packages/wheel*
  find /usr/lib/"$py" /usr/local/lib/"$py" /usr/lib/python3 -depth -type d -name tests -exec rm -rf {} +
  bytecode_only /usr/lib/"$py" /usr/local/lib/"$py" /usr/lib/python3
  # perl is Essential in Debian but nothing in the image runs it
  if dpkg-query -W perl-base >/dev/null 2>&1; then
    dpkg --purge --force-remove-essential --force-depends perl-base >/dev/null 2>&1
  fi
  rm -rf /usr/share/doc/* /usr/share/man/* /usr/share/info/* /usr/share/locale/* /usr/share/lintian \
    /usr/lib/x86_64-linux-gnu/gconv /usr/lib/*-linux-gnu/gconv /usr/share/perl* \
    /var/lib/apt/lists/* /var/cache/apt/* /var/cache/debconf/*-old /var/log/* /root/.cache
}

netkit() {
  rm -rf "$NETKIT_DIR"
  cp -r "$src/netkit" "$NETKIT_DIR"
  bytecode_only "$NETKIT_DIR"
  printf '%s\n' '#!/usr/bin/python3' 'import sys' 'from netkit.cli import main' 'sys.exit(main())' \
    >/usr/local/bin/netkit
  chmod 755 /usr/local/bin/netkit
}

case "$what" in
  requirements) requirements ;;
  trim) trim ;;
  netkit) netkit ;;
  *) echo "image-finish.sh: unknown step '$what' (requirements, trim or netkit)" >&2; exit 2 ;;
esac
