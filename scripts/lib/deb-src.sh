# shellcheck shell=bash
# enable_deb_src: make `apt-get source` work on a Debian machine that has no deb-src line, by
# writing a deb-src copy of the machine's own Debian source (deb822
# /etc/apt/sources.list.d/debian.sources, or the deb lines of /etc/apt/sources.list) to
# /etc/apt/sources.list.d/numalab-deb-src.*. No mirror address is written here: it is the
# machine's own. Sourced by scripts/hwloc-corpus.sh and scripts/numactl-suite.sh, which
# define `say` and `as_root`. Returns 1 (after saying why) when there is no Debian source.
enable_deb_src() {
  if grep -Eqs '^\s*(deb-src\s|Types:.*deb-src)' /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; then
    return 0
  fi
  if [ -f /etc/apt/sources.list.d/debian.sources ]; then
    say "enabling deb-src: a Types: deb-src copy of /etc/apt/sources.list.d/debian.sources"
    sed -E 's/^Types:.*/Types: deb-src/' /etc/apt/sources.list.d/debian.sources |
      as_root tee /etc/apt/sources.list.d/numalab-deb-src.sources >/dev/null
  elif grep -Eqs '^\s*deb\s' /etc/apt/sources.list; then
    say "enabling deb-src: the deb lines of /etc/apt/sources.list as deb-src"
    grep -E '^\s*deb\s' /etc/apt/sources.list | sed -E 's/^(\s*)deb\s/\1deb-src /' |
      as_root tee /etc/apt/sources.list.d/numalab-deb-src.list >/dev/null
  else
    say "no Debian apt source found (/etc/apt/sources.list.d/debian.sources or deb lines in /etc/apt/sources.list)"
    return 1
  fi
}
