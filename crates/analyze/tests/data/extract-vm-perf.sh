#!/bin/sh
# Turn the console log of `bash vm/run-tests.sh --kernel 6.12 --with-perf --bin vm_perf_record`
# into fixture files, and make the `perf script` dumps beside them (README.md).
# usage: extract-vm-perf.sh LOG [DEST_DIR]     (DEST_DIR: this directory)
# LOG is vm/.cache/logs/vm-<kernel>.log; the base64 tar between VMPERF-BEGIN and VMPERF-END
# holds vm-faults-{full,callchain}.{data,layout.txt} (console carriage returns and the
# harness's prefixes are removed).
set -eu
log=$1 dest=${2:-$(dirname "$0")}
mkdir -p "$dest"
sed -e 's/\r$//' -e 's/^\[[0-9.]*\] //' "$log" |
    awk '/VMPERF-BEGIN/ {on = 1; next} /VMPERF-END/ {on = 0} on' |
    base64 -d | gzip -d | tar xf - -C "$dest"
cd "$dest"
chmod 644 vm-faults-*.data   # perf writes 0600
# The same fields as the host recordings' dumps.
perf script -i vm-faults-full.data --ns -G \
    -F event,pid,tid,cpu,time,ip,addr,phys_addr,weight,data_page_size,code_page_size \
    > vm-faults-full.fields.txt
perf script -i vm-faults-callchain.data --ns -G -F event,pid,tid,cpu,time,ip,addr \
    > vm-faults-callchain.fields.txt
for f in vm-faults-full vm-faults-callchain; do
    perf script -i $f.data --ns -G -F data_src | awk '{print $1}' > $f.data_src.txt
done
echo "extracted into $dest"
