#!/usr/bin/env bash
# Installs sluice's build, test and run dependencies from Debian 12 packages.
# Idempotent: packages already present are skipped and apt is not touched at all
# when nothing is missing. Must run as root (or with sudo available).
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git ca-certificates
  clang-14 libclang-rt-14-dev clang-format
  libboost1.81-dev libboost-json1.81-dev libboost-url1.81-dev
  libssl-dev openssl
  libhyperscan-dev libre2-dev
  zlib1g-dev libbrotli-dev libzstd-dev libutf8proc-dev libicu-dev
  libyaml-cpp-dev prometheus-cpp-dev libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  curl python3 nodejs
  node-undici node-ws node-https-proxy-agent  # the Node client recipes in deploy/README.md
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
