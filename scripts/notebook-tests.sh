#!/usr/bin/env bash
# A study's results in notebooks (docs/study.md, "In notebooks"): python/tests run with pytest
# in a venv of pandas, polars, pyarrow and pytest from PyPI (created under target/ on the first
# run, reused after), against the release build of numalab.
#
#   scripts/notebook-tests.sh
#
# Needs python3 with its venv module and access to PyPI (pip's default index).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=target/notebook-venv
if [ ! -x "$venv/bin/pytest" ] || ! "$venv/bin/python" -c 'import pandas, polars, pyarrow' 2>/dev/null; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check pandas polars pyarrow pytest
fi
cargo build --release -q -p numalab
NUMALAB_BIN=$PWD/target/release/numalab NUMALAB_REPO=$PWD "$venv/bin/pytest" -q python/tests
