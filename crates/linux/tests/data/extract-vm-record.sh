#!/bin/sh
# Turn the console log of `bash vm/run-tests.sh --bin vm_record` into a fixture directory.
# usage: extract-vm-record.sh LOG DEST_DIR
# LOG is vm/.cache/logs/vm-<kernel>.log; the base64 tar between VMREC-BEGIN and VMREC-END is
# unpacked into DEST_DIR (console carriage returns and the harness's prefixes are removed).
set -eu
log=$1 dest=$2
mkdir -p "$dest"
sed -e 's/\r$//' -e 's/^\[[0-9.]*\] //' "$log" |
    awk '/VMREC-BEGIN/ {on = 1; next} /VMREC-END/ {on = 0} on' |
    base64 -d | gzip -d | tar xf - -C "$dest"
echo "extracted into $dest"
