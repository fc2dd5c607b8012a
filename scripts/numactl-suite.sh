#!/usr/bin/env bash
# Build numactl's own test suite (Debian bookworm's numactl source package, 2.0.16) for
# crates/cli/tests/vm_numactl_suite.rs, which runs it in the test VM twice: with the real
# numactl and with `numalab run` in its place (docs/numactl.md, docs/testing.md).
#
#   bash scripts/numactl-suite.sh      prints the built tree (target/numactl-suite/numactl) last
#
# Needs Debian bookworm and root (or sudo). Steps, each skipped when already done:
# 1. deb-src, as scripts/hwloc-corpus.sh enables it (a deb-src copy of the machine's own
#    Debian source; no mirror address is written here);
# 2. `apt-get source --download-only numactl/bookworm`, unpacked into target/numactl-suite/;
# 3. autoconf, automake, libtool and gcc from bookworm, then autogen.sh, configure
#    --disable-shared (so numactl, memhog and the test programs are plain executables that
#    run in the VM without libtool's wrappers) and `make check TESTS=` (builds every program
#    `make check` runs, runs none).
# Messages go to stderr; stdout holds only the tree.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
dest="$root/target/numactl-suite"
tree="$dest/numactl"
say() { echo "numactl-suite: $*" >&2; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
# shellcheck source=lib/deb-src.sh
. "$root/scripts/lib/deb-src.sh"
export DEBIAN_FRONTEND=noninteractive

if [ -x "$tree/numactl" ] && [ -x "$tree/test/distance" ] && [ -x "$tree/memhog" ]; then
  say "already built in $tree"
  echo "$tree"
  exit 0
fi

# 1. deb-src, derived from what the machine has.
enable_deb_src
as_root apt-get update -qq

# 2. the bookworm source package.
dl="$dest/download"
mkdir -p "$dl"
chmod 777 "$dl" 2>/dev/null || true # apt's _apt user downloads into it
(cd "$dl" && [ -n "$(ls numactl_*.orig.tar.* 2>/dev/null)" ] || as_root apt-get source -qq --download-only numactl/bookworm)
orig=$(ls "$dl"/numactl_*.orig.tar.* | sed -n 1p)
top=$(tar tf "$orig" | sed -n 1p | cut -d/ -f1)
rm -rf "$tree" "$dest/unpack" && mkdir -p "$dest/unpack"
tar xf "$orig" -C "$dest/unpack"
mv "$dest/unpack/$top" "$tree"
rmdir "$dest/unpack"
say "unpacked $(basename "$orig") into $tree"

# 3. the build tools, then the programs.
need=()
for p in autoconf:autoreconf automake:automake libtool:libtoolize gcc:gcc make:make; do
  command -v "${p#*:}" >/dev/null || need+=("${p%%:*}")
done
if [ ${#need[@]} -gt 0 ]; then
  say "installing ${need[*]}"
  as_root apt-get install -y -qq --no-install-recommends "${need[@]}" >&2
fi
(
  cd "$tree"
  ./autogen.sh >&2
  ./configure -q --disable-shared >&2
  make -s -j"$(nproc)" >&2
  make -s -j"$(nproc)" check TESTS= >&2
)
[ -x "$tree/numactl" ] && [ -x "$tree/test/distance" ] || { say "the build made no numactl or test/distance"; exit 1; }
say "built $(cat "$tree/VERSION" 2>/dev/null || echo numactl) in $tree"
echo "$tree"
