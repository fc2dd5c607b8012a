# shellcheck shell=bash
# Host packages the harness needs, installed with apt (Debian 12 "bookworm" hosts).

# Debian packages -> a command each provides (to skip apt when everything is there).
VM_PACKAGES=(
  "qemu-system-x86:qemu-system-x86_64"
  "busybox-static:"          # checked by file below: the dynamic busybox would not run in the VM
  "cpio:cpio"
  "gzip:gzip"
  "jq:jq"                    # reads cargo's JSON messages
  "binutils:strip"           # strips debug info so the initramfs stays small
  "coreutils:timeout"
  "numactl:migratepages"     # numactl's migratepages (`numalab bench migrate`) and numastat
)

# Runs a command as root (the harness is usually run as root in CI; sudo otherwise).
as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"
  elif command -v sudo >/dev/null; then sudo "$@"
  else die "need root for: $*"
  fi
}

# Adds bookworm-backports to the Suites: line that already lists "bookworm bookworm-updates"
# in the machine's own deb822 source. Only the suite name is added: the mirror address stays
# whatever the machine uses. Idempotent. Returns 0 when the file changed.
VM_APT_SOURCES=/etc/apt/sources.list.d/debian.sources
enable_backports() {
  local f=$VM_APT_SOURCES line
  # Already enabled anywhere (this line, another stanza or another file): nothing to do.
  if grep -Eqs '^[^#]*[[:space:]]bookworm-backports([[:space:]]|$)' /etc/apt/sources.list "$f" \
       /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; then
    return 1
  fi
  [ -f "$f" ] || die "$f not found: the harness expects Debian 12's deb822 apt source (enable bookworm-backports by hand)"
  line=$(grep -E '^Suites:.*[[:space:]]bookworm[[:space:]]+bookworm-updates([[:space:]]|$)' "$f")
  [ -n "$line" ] || die "$f has no 'Suites:' line with 'bookworm bookworm-updates': enable bookworm-backports by hand"
  log "adding bookworm-backports to the Suites: line of $f"
  # The sed is idempotent on its own too: it skips a line that already has the suite.
  as_root sed -i -E '/^Suites:.*[[:space:]]bookworm[[:space:]]+bookworm-updates([[:space:]]|$)/ { /[[:space:]]bookworm-backports([[:space:]]|$)/! s/[[:space:]]*$/ bookworm-backports/ }' "$f"
  return 0
}

busybox_static_ok() { [ -x /bin/busybox ] && file -L /bin/busybox | grep -q 'statically linked'; }

# Installs what is missing. apt-get update runs only when something must be installed, when the
# backports suite was just added, or when asked (--update): repeated runs stay offline.
VM_APT_UPDATED=0
apt_update() {
  [ "$VM_APT_UPDATED" = 1 ] && return 0
  log "apt-get update"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq || die "apt-get update failed"
  VM_APT_UPDATED=1
}
ensure_host_deps() {
  local force_update=$1 missing=() entry pkg cmd
  for entry in "${VM_PACKAGES[@]}"; do
    pkg=${entry%%:*} cmd=${entry#*:}
    if [ "$pkg" = busybox-static ]; then busybox_static_ok || missing+=("$pkg"); continue; fi
    command -v "$cmd" >/dev/null || missing+=("$pkg")
  done
  command -v file >/dev/null || missing+=(file)
  if enable_backports || [ "$force_update" = 1 ] || [ ${#missing[@]} -gt 0 ]; then
    apt_update
  fi
  if [ ${#missing[@]} -gt 0 ]; then
    log "apt-get install ${missing[*]}"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
      || die "apt-get install ${missing[*]} failed"
  fi
  busybox_static_ok || die "/bin/busybox is not statically linked (package busybox-static)"
}
