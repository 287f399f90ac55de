#!/usr/bin/env bash
# Installs what the chosen profile needs, and nothing twice: Debian packages that are missing
# (apt-get) and the Python packages into ./.venv (pip, re-run when pyproject.toml changes).
#   scripts/setup.sh demo   what `make demo` runs: iptables, nftables, ipset, iproute2, conntrack
#   scripts/setup.sh test   (the default) every test, also the IPVS VM (qemu, busybox), dig/socat/tcpdump
#                           and promtool (Debian's prometheus package: checks deploy/monitoring's rules)
#                           and the node image's build and runtime (podman, runc, mmdebstrap)
set -euo pipefail
cd "$(dirname "$0")/.."

PROFILE=${1:-test}
DEMO_PACKAGES=(iptables nftables python3-nftables ipset conntrack iproute2 kmod)
case "$PROFILE" in
  demo) APT_PACKAGES=("${DEMO_PACKAGES[@]}"); EXTRAS="" ;;
  test) APT_PACKAGES=("${DEMO_PACKAGES[@]}" ipvsadm socat ethtool tcpdump dnsutils qemu-system-x86 busybox-static
                      xz-utils prometheus podman runc mmdebstrap binutils); EXTRAS="[test,bench]" ;;
  *) echo "setup: unknown profile '$PROFILE' (demo or test)" >&2; exit 2 ;;
esac
EXTRA_APT=${NETKIT_EXTRA_APT:-}

missing=()
for pkg in "${APT_PACKAGES[@]}" $EXTRA_APT; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # Debian's prometheus package is here for promtool alone; on a systemd host its postinst also starts
  # a Prometheus server on :9090. One this script just installed is stopped and disabled again.
  if [[ " ${missing[*]} " == *" prometheus "* ]] && command -v systemctl >/dev/null \
     && systemctl is-enabled prometheus >/dev/null 2>&1; then
    $SUDO systemctl disable --now prometheus >/dev/null 2>&1 || true
  fi
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  "$PY" -m venv .venv
fi
stamp=.venv/.netkit-installed
want="$(sha256sum pyproject.toml | cut -d' ' -f1) $EXTRAS"
# the test profile's packages include the demo's: a venv set up for tests serves the demo as it is
if [ ! -f "$stamp" ] || { [ "$(cat "$stamp")" != "$want" ] && [ "$(cat "$stamp")" != "$want[test,bench]" ]; }; then
  echo "setup: installing Python packages into .venv"
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
  .venv/bin/python -m pip install -q -e ".$EXTRAS"
  echo "$want" > "$stamp"
fi
