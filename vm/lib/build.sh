# shellcheck shell=bash
# Test binaries and the initramfs.
#
# Convention: an integration test file crates/*/tests/vm_*.rs (any test target whose name starts
# with vm_) holds tests marked #[ignore = "needs the multi-node VM: see docs/testing.md"]. A plain
# `cargo test` skips them; the VM runs them with --ignored.
#
# The binaries are the host's own release build (the same artifacts `cargo test --workspace
# --release` builds, so after it nothing is compiled again), dynamically linked: each goes into
# the initramfs with the shared libraries ldd names for it, as numactl's tools do. (Until
# 2026-12-02 they were linked statically, +crt-static for an explicit --target: a second build
# of every dependency, about 5 minutes of CI's 2 cores, for nothing the VM needs.)

# Prints "package<TAB>target" for every test target named vm_* in the workspace.
vm_test_targets() {
  local meta
  meta=$(cd "$VM_REPO" && cargo metadata --no-deps --format-version 1) || die "cargo metadata failed: the workspace does not load"
  jq -r '.packages[] | .name as $p | .targets[] | select(.kind | index("test")) | select(.name | startswith("vm_")) | "\($p)\t\(.name)"' <<<"$meta"
}

# cargo in the VM's target dir, JSON messages on stdout; prints "name<TAB>executable" for the
# artifacts that match the jq filter given as $1.
cargo_vm() {
  local select=$1; shift
  (cd "$VM_REPO" &&
   CARGO_TARGET_DIR="$VM_TARGET_DIR" cargo "$@" --release --message-format=json-render-diagnostics) |
    jq -r "select(.reason == \"compiler-artifact\" and .executable != null) | $select | \"\(.target.name)\t\(.executable)\""
  return "${PIPESTATUS[0]}"
}

# Copies the shared libraries ldd names for the host executable $1 into the tree $2, at their
# host paths (each once: the binaries share glibc). Nothing for a static executable.
copy_libs() {
  local exe=$1 root=$2 lib
  for lib in $( (ldd "$exe" 2>/dev/null || true) | grep -o '/[^ ]*' || true); do
    [ -e "$root$lib" ] && continue
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
  done
}

# Copies the executable $1, without its debug info, to $3 inside the initramfs root $2, with its
# shared libraries.
install_bin() {
  local exe=$1 root=$2 dest=$3
  mkdir -p "$(dirname "$root$dest")"
  strip --strip-debug -o "$root$dest" "$exe"
  copy_libs "$exe" "$root"
}

# Fills $1/tests (the initramfs root $1) with the test binaries: vm_* tests of the workspace
# plus --extra-bin files.
build_test_bins() {
  local root=$1 pkgs=() tests=() line pkg target out
  mkdir -p "$root/tests"
  out=$(vm_test_targets) || exit 2
  while IFS=$'\t' read -r pkg target; do
    [ -n "$pkg" ] || continue
    pkgs+=(-p "$pkg"); tests+=(--test "$target")
  done <<<"$out"
  if [ ${#tests[@]} -gt 0 ]; then
    log "building $((${#tests[@]} / 2)) vm_ test binaries (release, target dir $VM_TARGET_DIR)"
    # Duplicated -p is harmless; every --test name exists in exactly one selected package.
    out=$(cargo_vm 'select(.target.kind | index("test")) | select(.target.name | startswith("vm_"))' \
            test --no-run "${pkgs[@]}" "${tests[@]}") || die "cargo test --no-run failed"
    while IFS=$'\t' read -r target line; do
      [ -n "$target" ] || continue
      install_bin "$line" "$root" "/tests/$target"
    done <<<"$out"
  else
    log "no vm_ test binaries in the workspace (no crates/*/tests/vm_*.rs)"
  fi
  install_extra_bins "$root"
}

# --extra-bin executables, with their libraries; cargo's deps/NAME-HASH files are named NAME.
install_extra_bins() {
  local root=$1 line
  for line in "${VM_EXTRA_BINS[@]}"; do
    [ -x "$line" ] || die "--extra-bin $line: not an executable file"
    install_bin "$line" "$root" "/tests/$(basename "$line" | sed 's/-[0-9a-f]\{16\}$//')"
  done
}

# Builds the numalab CLI into the initramfs root $1 as /bin/numalab (tests reach it through
# NUMALAB_BIN=/bin/numalab).
build_cli() {
  local root=$1 out exe
  log "building the numalab CLI"
  out=$(cargo_vm 'select(.target.name == "numalab" and (.target.kind | index("bin")))' \
          build -p numalab --bin numalab) || die "cargo build -p numalab failed"
  exe=$(cut -f2 <<<"$out" | tail -n 1)
  [ -x "$exe" ] || die "cargo built no numalab executable"
  install_bin "$exe" "$root" /bin/numalab
}

# Copies a dynamically linked host program and the libraries ldd names into the tree $2, at
# the same paths, so it runs in the VM (numactl's migratepages, a benchmark baseline, and
# numastat, the reference of `numalab numastat`).
copy_with_libs() {
  local prog=$1 root=$2
  [ -x "$prog" ] || { warn "$prog not found: not in the VM"; return 0; }
  mkdir -p "$root$(dirname "$prog")"
  cp -L "$prog" "$root$prog"
  copy_libs "$prog" "$root"
}

# Copies a host program to the path $3 inside the tree $2, and the libraries ldd names at
# their own paths.
copy_as() {
  local prog=$1 root=$2 dest=$3
  mkdir -p "$root$(dirname "$dest")"
  cp -L "$prog" "$root$dest"
  copy_libs "$prog" "$root"
}

# numactl's test suite built by scripts/numactl-suite.sh, when it is there, into
# /numactl-suite (its programs and test scripts, no sources), with what its scripts run that
# busybox lacks: bash (the #!/bin/bash of every script) and GNU grep (bind_range's grep -P) in
# /gnu/bin, which crates/cli/tests/vm_numactl_suite.rs puts first in PATH.
stage_numactl_suite() {
  local root=$1 suite="$VM_REPO/target/numactl-suite/numactl" f
  [ -x "$suite/numactl" ] || { log "numactl's test suite not built (bash scripts/numactl-suite.sh): not in the VM"; return 0; }
  mkdir -p "$root/numactl-suite/test"
  for f in "$suite"/* "$suite"/test/*; do
    [ -f "$f" ] || continue
    case "$f" in *.c|*.h|*.o|*.a|*.la|*.in|*.am|*.ac|*.log|*.trs|*.m4|*.8|*.3|*.2|*.md) continue ;; esac
    if [ -x "$f" ]; then
      copy_as "$f" "$root" "/numactl-suite/${f#"$suite"/}"
    fi
  done
  cp "$suite/VERSION" "$root/numactl-suite/VERSION"
  copy_as /bin/bash "$root" /bin/bash
  copy_as /bin/grep "$root" /gnu/bin/grep
  printf '#!/bin/sh\nexec /gnu/bin/grep -F "$@"\n' >"$root/gnu/bin/fgrep"
  chmod 0755 "$root/gnu/bin/fgrep"
}

# Assembles the initramfs (newc cpio, gzip) at $VM_INITRD from a staging tree in the cache:
#   /init  /bin/busybox (+ /bin/sh)  /bin/numalab  /tests/*  /proc /sys /dev /tmp
# With $1 = 0 (--no-build) the binaries staged by the last build are kept and only /init,
# busybox and --extra-bin files are refreshed, so editing vm/init needs no cargo run.
build_initramfs() {
  local build=$1 root="$VM_CACHE/initramfs" f
  if [ "$build" = 1 ]; then
    rm -rf "$root"
  else
    [ -d "$root/tests" ] || die "--no-build: nothing built yet in $root (run once without --no-build)"
    log "--no-build: reusing the binaries staged in $root"
  fi
  mkdir -p "$root"/{bin,tests,proc,sys,dev,tmp,etc,root}
  cp /bin/busybox "$root/bin/busybox"
  ln -sfn busybox "$root/bin/sh"
  install -m 0755 "$VM_REPO/vm/init" "$root/init"
  copy_with_libs /usr/bin/migratepages "$root"
  # numactl's numastat and numactl, which crates/cli/tests/vm_numastat.rs and
  # vm_numactl_show.rs compare `numalab numastat` and `numalab run --show/--hardware` with
  copy_with_libs /usr/bin/numastat "$root"
  copy_with_libs /usr/bin/numactl "$root"
  stage_numactl_suite "$root"
  # --with-perf: the host's perf (dynamic, ~30 MB with its libraries) for tests that record
  # perf.data in the VM (crates/analyze/tests/vm_perf_record.rs); removed again without it, so a
  # --no-build run does not keep it from an earlier one.
  if [ "${VM_WITH_PERF:-0}" = 1 ]; then
    [ -x /usr/bin/perf ] || die "--with-perf: /usr/bin/perf not found (apt-get install linux-perf)"
    # /usr/bin/perf may be a wrapper script that execs perf_VERSION: take both.
    for f in /usr/bin/perf /usr/bin/perf_[0-9]*; do if [ -e "$f" ]; then copy_with_libs "$f" "$root"; fi; done
  else
    rm -f "$root"/usr/bin/perf "$root"/usr/bin/perf_[0-9]*
  fi
  if [ "$build" = 1 ]; then
    if [ "$VM_CLI" = 1 ]; then build_cli "$root"; else warn "--no-cli: no /bin/numalab in the VM"; fi
    build_test_bins "$root"
  else
    install_extra_bins "$root"
  fi
  echo "root:x:0:0:root:/root:/bin/sh" >"$root/etc/passwd"
  echo "root:x:0:" >"$root/etc/group"
  # Sorted names and root ownership make the archive depend only on its contents.
  (cd "$root" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet) | gzip -6 >"$VM_INITRD"
  log "initramfs: $(du -h "$VM_INITRD" | cut -f1) with test binaries: $(ls "$root/tests" | tr '\n' ' ')"
}
