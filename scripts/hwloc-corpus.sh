#!/usr/bin/env bash
# Fetch hwloc's own XML test corpus and Debian's hwloc tools, for the corpus test
# (crates/machine/tests/hwloc_corpus.rs, docs/testing.md).
#
#   bash scripts/hwloc-corpus.sh      prints the corpus folder (target/hwloc-corpus/xml) last
#
# Needs Debian bookworm and root (or sudo). Steps, each skipped when already done:
# 1. deb-src: a `Types: deb-src` copy of the machine's own Debian source file
#    (/etc/apt/sources.list.d/debian.sources, deb822) or of the `deb` lines of
#    /etc/apt/sources.list, written to /etc/apt/sources.list.d/numalab-deb-src.*; no mirror
#    address is written here, it is the machine's own;
# 2. `apt-get source --download-only hwloc/bookworm` (2.9.0-1: the bookworm release, whose 36
#    files in tests/hwloc/xml/ the test reads; a backports version may be listed but absent);
# 3. the XML files unpacked from its upstream tarball into target/hwloc-corpus/xml;
# 4. Debian's `hwloc` package (hwloc-info, hwloc-calc, lstopo-no-graphics) from bookworm.
# Messages go to stderr; stdout holds only the corpus folder.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
dest="$root/target/hwloc-corpus"
xml="$dest/xml"
say() { echo "hwloc-corpus: $*" >&2; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
# shellcheck source=lib/deb-src.sh
. "$root/scripts/lib/deb-src.sh"
export DEBIAN_FRONTEND=noninteractive

have_tools() { command -v hwloc-calc >/dev/null && command -v hwloc-info >/dev/null && command -v lstopo-no-graphics >/dev/null; }

if [ -n "$(ls "$xml"/*.xml 2>/dev/null)" ] && have_tools; then
  say "corpus and tools already there ($(ls "$xml"/*.xml | wc -l) XML files)"
  echo "$xml"
  exit 0
fi

updated=0
if [ -z "$(ls "$xml"/*.xml 2>/dev/null)" ]; then
  # 1. deb-src, derived from what the machine has.
  enable_deb_src
  as_root apt-get update -qq
  updated=1
  # 2. the bookworm source package.
  dl="$dest/download"
  mkdir -p "$dl"
  chmod 777 "$dl" 2>/dev/null || true # apt's _apt user downloads into it
  (cd "$dl" && [ -n "$(ls hwloc_*.orig.tar.* 2>/dev/null)" ] || as_root apt-get source -qq --download-only hwloc/bookworm)
  # 3. the XML corpus (tar needs bzip2 for the .tar.bz2).
  command -v bzip2 >/dev/null || as_root apt-get install -y -qq --no-install-recommends bzip2 >&2
  orig=$(ls "$dl"/hwloc_*.orig.tar.* | sed -n 1p)
  top=$(tar tf "$orig" | sed -n 1p | cut -d/ -f1)
  tmp="$dest/unpack"
  rm -rf "$tmp" && mkdir -p "$tmp"
  tar xf "$orig" -C "$tmp" "$top/tests/hwloc/xml" "$top/COPYING"
  rm -rf "$xml"
  mv "$tmp/$top/tests/hwloc/xml" "$xml"
  cp "$tmp/$top/COPYING" "$dest/COPYING"
  rm -rf "$tmp"
  say "unpacked $(ls "$xml"/*.xml | wc -l) XML files of $(basename "$orig") into $xml"
fi

# 4. Debian's hwloc tools.
if ! have_tools; then
  [ "$updated" = 1 ] || as_root apt-get update -qq
  as_root apt-get install -y -qq --no-install-recommends hwloc/bookworm >&2
fi
have_tools || { say "hwloc-calc, hwloc-info or lstopo-no-graphics still missing after installing hwloc"; exit 1; }
say "tools: $(hwloc-calc --version 2>&1 | head -1)"
echo "$xml"
