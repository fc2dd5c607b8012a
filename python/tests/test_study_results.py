"""A study's results in notebooks: numalab's Parquet and CSV tables load in pandas and polars
with one row per run, every axis and metric a typed column (docs/study.md, "In notebooks").

Run by scripts/notebook-tests.sh (a venv with pandas, polars, pyarrow and pytest from PyPI);
NUMALAB_BIN names the numalab binary, NUMALAB_REPO the checkout (for the example study).
"""

import os
import subprocess
from pathlib import Path

import pandas as pd
import polars as pl
import pytest

REPO = Path(os.environ.get("NUMALAB_REPO", Path(__file__).resolve().parents[2]))
NUMALAB = os.environ.get("NUMALAB_BIN", str(REPO / "target" / "release" / "numalab"))

AXES = ["thp", "mempolicy"]
CONFIGS = [
    "thp=4K mempolicy=first-touch",
    "thp=4K mempolicy=interleave",
    "thp=THP mempolicy=first-touch",
    "thp=THP mempolicy=interleave",
]


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    out = tmp_path_factory.mktemp("study") / "cg-thp"
    subprocess.run(
        [NUMALAB, "study", "run", str(REPO / "docs/studies/cg-thp.toml"), "-o", str(out), "-q"],
        check=True,
        capture_output=True,
    )
    return out


def test_pandas_reads_one_row_per_run_with_typed_columns(study):
    df = pd.read_parquet(study / "results.parquet")
    assert len(df) == 8
    assert list(df.columns[:3]) == ["config", *AXES]
    assert set(df["status"]) == {"ok"}
    assert df["repeat"].tolist() == [0, 1] * 4
    for col in ["sim_time_ms", "lar_percent", "imbalance_percent", "dram_read_gb"]:
        assert pd.api.types.is_float_dtype(df[col]), col
    # the docs' example: each configuration's time described over its repeats
    desc = df.groupby("config").sim_time_ms.describe()
    assert sorted(desc.index) == sorted(CONFIGS)
    assert (desc["count"] == 2).all() and (desc["mean"] > 0).all()
    # first touch keeps 4 KiB pages local, interleave spreads them over the 4 nodes
    lar = df.groupby("config").lar_percent.mean()
    assert lar["thp=4K mempolicy=first-touch"] > 90
    assert lar["thp=4K mempolicy=interleave"] < 40


def test_polars_reads_the_same_table(study):
    pdf = pd.read_parquet(study / "results.parquet")
    df = pl.read_parquet(study / "results.parquet")
    assert df.height == 8
    assert df.columns == list(pdf.columns)
    assert df.schema["sim_time_ms"] == pl.Float64
    assert df.schema["repeat"] == pl.UInt64
    means = df.group_by("config").agg(pl.col("sim_time_ms").mean()).sort("config")
    expected = pdf.groupby("config").sim_time_ms.mean().sort_index()
    assert means["config"].to_list() == expected.index.tolist()
    assert means["sim_time_ms"].to_list() == pytest.approx(expected.tolist(), rel=1e-12)


def test_the_csv_holds_the_same_values(study):
    pq = pd.read_parquet(study / "results.parquet")
    csv = pd.read_csv(study / "results.csv")
    assert list(csv.columns) == list(pq.columns)
    assert csv["config"].tolist() == pq["config"].tolist()
    for col in ["sim_time_ms", "lar_percent", "maptu"]:
        assert csv[col].tolist() == pytest.approx(pq[col].tolist(), rel=1e-12), col
