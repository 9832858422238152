#!/usr/bin/env bash
# Installs what tracecost needs and is missing on this machine.
#   scripts/setup.sh                   Debian packages, then the .venv with the tracecost package
#   scripts/setup.sh --check-packages  Debian packages only (fast when nothing is missing)
set -euo pipefail
cd "$(dirname "$0")/.."

# What every part needs; each suite lists its own in tracecost/suites/NAME/packages.txt.
PACKAGES=(
  clang llvm libbpf-dev bpftool libelf-dev zlib1g-dev pkg-config    # BPF objects, skeletons, loaders
  chromium chromium-driver                                          # the report's real-browser test
  curl openssl                                                      # the report's plotly.js bundle
)
for list in tracecost/suites/*/packages.txt; do
  # Words outside comments, one package each.
  PACKAGES+=($(sed 's/#.*//' "$list"))
done

missing=()
for pkg in "${PACKAGES[@]}"; do
  [[ " ${missing[*]} " == *" $pkg "* ]] && continue  # listed by two suites
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
done
if ((${#missing[@]})); then
  if [[ $EUID -ne 0 ]]; then
    echo "setup: missing Debian packages (${missing[*]}); run as root to install them" >&2
    exit 1
  fi
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # Installing nginx or redis-server would start the system's (on ports 80 and 6379); tracecost
  # starts its own, privately, and never touches the system's services. Where no policy says
  # otherwise, a temporary policy-rc.d (invoke-rc.d's documented hook) refuses service starts
  # during the install.
  policy=/usr/sbin/policy-rc.d ours=
  if [[ ! -e $policy ]]; then
    ours=1
    trap 'rm -f "$policy"' EXIT
    printf '#!/bin/sh\n# tracecost setup: no service starts during its install\nexit 101\n' > "$policy"
    chmod 755 "$policy"
  fi
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
  if [[ -n $ours ]]; then
    rm -f "$policy"
    trap - EXIT
  fi
fi
for tool in cargo python3; do
  command -v "$tool" >/dev/null || { echo "setup: $tool is required but not installed" >&2; exit 1; }
done
[[ ${1:-} == --check-packages ]] && exit 0

python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q -e '.[test]'
