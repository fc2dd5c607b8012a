# shellcheck shell=bash
# Stock Debian cloud kernels for the VM: downloaded with apt-get download (never installed on
# the host) and unpacked with dpkg-deb into the cache.
#
#   6.12: linux-image-6.12.*+deb12-cloud-amd64 (bookworm-backports; the same builds also reach
#         bookworm-security), the main target: weighted interleave (6.9+), memory tiers.
#   6.1:  linux-image-6.1.0-*-cloud-amd64 (bookworm itself), the older kernel.
#
# The cloud flavour has everything the VM needs built in (8250 serial console, initramfs with
# gzip, devtmpfs, tmpfs, ACPI NUMA); kernel_check_config verifies it, so no module is loaded.

# Package-name patterns per series (the -unsigned and -dbg variants do not match).
kernel_pattern() {
  case "$1" in
    6.12) echo '^linux-image-6\.12\.[0-9]+\+deb12(\.[0-9]+)?-cloud-amd64$' ;;
    6.1)  echo '^linux-image-6\.1\.0-[0-9]+-cloud-amd64$' ;;
    *) die "unknown kernel series '$1' (expected 6.12 or 6.1)" ;;
  esac
}

# Prints the newest package of a series that apt can download, or nothing.
kernel_newest_package() {
  local pat pkg cand
  pat=$(kernel_pattern "$1")
  # Newest first; the first with a candidate version wins (names may linger in the lists).
  for pkg in $(apt-cache pkgnames linux-image-6.1 2>/dev/null | grep -E "$pat" | sort -Vr); do
    cand=$(apt-cache policy "$pkg" 2>/dev/null | awk '/Candidate:/ {print $2}')
    if [ -n "$cand" ] && [ "$cand" != "(none)" ]; then echo "$pkg"; return 0; fi
  done
  return 0
}

# Fails unless the options the VM relies on are built in (=y, not modules).
kernel_check_config() {
  local config=$1 opt missing=()
  for opt in SERIAL_8250 SERIAL_8250_CONSOLE BLK_DEV_INITRD RD_GZIP DEVTMPFS TMPFS PROC_FS SYSFS \
             NUMA ACPI ACPI_NUMA X86_64_ACPI_NUMA MIGRATION; do
    grep -q "^CONFIG_$opt=y$" "$config" || missing+=("CONFIG_$opt")
  done
  [ ${#missing[@]} = 0 ] || die "kernel $(basename "$config") lacks built-in ${missing[*]}: it cannot boot the test VM without modules"
}

# Sets KERNEL_IMAGE and KERNEL_PKG for a series, downloading on first use.
# Without a usable apt list (offline), falls back to the newest kernel already in the cache.
kernel_fetch() {
  local series=$1 pkg dir tmp deb
  local kcache="$VM_CACHE/kernels"
  pkg=$(kernel_newest_package "$series")
  if [ -z "$pkg" ] && [ "$VM_APT_UPDATED" = 0 ]; then
    apt_update; pkg=$(kernel_newest_package "$series")
  fi
  if [ -z "$pkg" ]; then
    # Offline fallback: a previously unpacked kernel of this series.
    dir=$(find "$kcache" -mindepth 1 -maxdepth 1 -type d 2>/dev/null | grep -E "/$(kernel_pattern "$series" | sed 's/^\^//; s/\$$//')$" | sort -Vr | head -n 1 || true)
    [ -n "$dir" ] || die "no $series cloud kernel package found by apt-cache (is bookworm-backports enabled? try --update)"
    pkg=${dir##*/}
    warn "apt knows no $series cloud kernel; using the cached $pkg"
  fi
  dir="$kcache/$pkg"
  if [ ! -s "$dir/vmlinuz" ]; then
    log "downloading $pkg (not installed on the host, only unpacked into $dir)"
    tmp=$(mktemp -d "$kcache.tmp.XXXXXX" 2>/dev/null || { mkdir -p "$kcache"; mktemp -d "$kcache.tmp.XXXXXX"; })
    chmod 0777 "$tmp"   # apt-get download drops privileges to _apt when it can write here
    ( cd "$tmp" && apt-get download -q "$pkg" >/dev/null ) || { rm -rf "$tmp"; die "apt-get download $pkg failed"; }
    deb=$(ls "$tmp"/*.deb)
    dpkg-deb -x "$deb" "$tmp/x"
    mkdir -p "$dir"
    cp "$tmp"/x/boot/vmlinuz-* "$dir/vmlinuz"
    cp "$tmp"/x/boot/config-* "$dir/config"
    dpkg-deb -f "$deb" Version >"$dir/version"
    rm -rf "$tmp"
  fi
  kernel_check_config "$dir/config"
  KERNEL_IMAGE="$dir/vmlinuz"
  KERNEL_PKG="$pkg ($(cat "$dir/version" 2>/dev/null))"
}
