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
  zlib1g-dev libbrotli-dev libzstd-dev libbz2-dev libutf8proc-dev libicu-dev
  libsimdjson-dev  # dlp/src/joined_fields.cpp: the values of JSON bodies, for joined views
  libgit2-dev  # dlp/src/git.cpp: git pushes, packs indexed and read by libgit2 (issue 21)
  libarchive-dev  # dlp/src/archive.cpp: zip, tar, 7z, ... members of request bodies (issue 21)
  liblzma-dev  # dlp/src/decoders/lzma.cpp: .xz and .lzma streams anywhere in a body (issue 25)
  libpsl-dev  # dlp/src/hostname.cpp: registrable domains from the built-in Public Suffix List
  libyaml-cpp-dev prometheus-cpp-dev libspdlog-dev libfmt-dev
  libhiredis-dev redis-server  # proxy/src/redis_link.cpp, tests/e2e/test_fleet.py: the fleet control store (issue 22)
  libgtest-dev libgmock-dev libbenchmark-dev
  curl python3 nodejs
  chromium  # tests/e2e/test_console.py: the approvals console in headless Chromium
  node-undici node-ws node-https-proxy-agent  # the Node client recipes in deploy/README.md
  python3-websockets  # tests/e2e/test_websocket.py and bench/websocket_load.py
  dnsmasq-base  # tests/e2e/test_unscanned.py: a logging resolver (no name reaches DNS unscanned)
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

# npm comes with Debian's nodejs as a separate package (NodeSource's nodejs bundles it).
if ! command -v npm >/dev/null 2>&1; then missing+=(npm); fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
else
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Node test tools from the npm registry, pinned, in a prefix of their own (not the
# project's tree): playwright-core drives Debian's /usr/bin/chromium in
# tests/e2e/test_console.py. 1.61.1 is the newest release that still runs on Debian 12's
# Node 18; it downloads no browser (--ignore-scripts) and has no dependencies.
node_prefix=/opt/sluice-test-node
playwright_version=1.61.1
installed=$(node -p "require('$node_prefix/node_modules/playwright-core/package.json').version" \
  2>/dev/null || true)
if [ "$installed" = "$playwright_version" ]; then
  echo "install-deps: playwright-core $playwright_version present in $node_prefix"
else
  echo "install-deps: installing playwright-core $playwright_version into $node_prefix"
  $SUDO mkdir -p "$node_prefix"
  $SUDO npm install --prefix "$node_prefix" --no-audit --no-fund --ignore-scripts \
    --save-exact "playwright-core@$playwright_version"
fi
