//! The results table: one row per run, every axis and every metric a column; written as CSV
//! and Parquet (for pandas and polars), each file whole or not at all.

use crate::file::StudyKind;
use anyhow::{Context, Result};
use arrow_array::{ArrayRef, Float64Array, RecordBatch, StringArray, UInt64Array};
use numalab_core::atomic_file::with_temp;
use numalab_sim::SimResult;
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::sync::Arc;

/// The metrics of one run, as the `numalab sim` table names them (docs/model.md, "Metrics").
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunMetrics {
    pub sim_time_ms: f64,
    pub lar_percent: Option<f64>,
    pub imbalance_percent: Option<f64>,
    pub maptu: f64,
    pub mpki: Option<f64>,
    pub remote_load_ratio: Option<f64>,
    pub pagewalk_l2_miss_share_percent: Option<f64>,
    pub max_page_fault_time_share_percent: Option<f64>,
    pub pamup_percent: Option<f64>,
    pub nhp: Option<f64>,
    pub psp_percent: Option<f64>,
    pub memory_references: f64,
    pub page_walks: f64,
    pub page_faults: f64,
    pub dram_read_gb: f64,
    pub dram_write_gb: f64,
    pub max_link_utilisation_percent: f64,
    pub migrated_pages: f64,
    pub splits: f64,
    pub promotions: f64,
    pub policy_ms: f64,
    pub host_seconds: f64,
}

/// Column names of [`RunMetrics`], in order (also the CSV and Parquet order).
/// How many metrics a row holds.
pub const METRICS: usize = 22;

pub const METRIC_COLUMNS: [&str; METRICS] = [
    "sim_time_ms",
    "lar_percent",
    "imbalance_percent",
    "maptu",
    "mpki",
    "remote_load_ratio",
    "pagewalk_l2_miss_share_percent",
    "max_page_fault_time_share_percent",
    "pamup_percent",
    "nhp",
    "psp_percent",
    "memory_references",
    "page_walks",
    "page_faults",
    "dram_read_gb",
    "dram_write_gb",
    "max_link_utilisation_percent",
    "migrated_pages",
    "splits",
    "promotions",
    "policy_ms",
    "host_seconds",
];

impl RunMetrics {
    pub fn of(r: &SimResult) -> RunMetrics {
        let m = &r.metrics;
        let walks: u64 = r
            .per_thread
            .iter()
            .map(|t| t.page_walks.iter().sum::<u64>())
            .sum();
        RunMetrics {
            sim_time_ms: r.sim_time_ns / 1e6,
            lar_percent: m.lar_percent,
            imbalance_percent: m.imbalance_percent,
            maptu: m.maptu,
            mpki: m.mpki,
            remote_load_ratio: m.remote_load_ratio,
            pagewalk_l2_miss_share_percent: m.pagewalk_l2_miss_share_percent,
            max_page_fault_time_share_percent: m.max_page_fault_time_share_percent,
            pamup_percent: m.pamup_percent,
            nhp: m.nhp.map(|n| n as f64),
            psp_percent: m.psp_percent,
            memory_references: r.memory_references as f64,
            page_walks: walks as f64,
            page_faults: (r.vmstat.pgfault_4k + r.vmstat.pgfault_2m + r.vmstat.pgfault_1g) as f64,
            dram_read_gb: r
                .per_node
                .iter()
                .map(|n| n.ctrl_read_bytes as f64)
                .sum::<f64>()
                / 1e9,
            dram_write_gb: r
                .per_node
                .iter()
                .map(|n| n.ctrl_write_bytes as f64)
                .sum::<f64>()
                / 1e9,
            max_link_utilisation_percent: r
                .links
                .iter()
                .map(|l| l.avg_utilisation)
                .fold(0.0, f64::max)
                * 100.0,
            migrated_pages: r.migrated_pages as f64,
            splits: r.splits as f64,
            promotions: r.promotions as f64,
            policy_ms: r.policy_ns / 1e6,
            host_seconds: r.host_seconds,
        }
    }

    /// The values in [`METRIC_COLUMNS`] order.
    pub fn values(&self) -> [Option<f64>; METRICS] {
        [
            Some(self.sim_time_ms),
            self.lar_percent,
            self.imbalance_percent,
            Some(self.maptu),
            self.mpki,
            self.remote_load_ratio,
            self.pagewalk_l2_miss_share_percent,
            self.max_page_fault_time_share_percent,
            self.pamup_percent,
            self.nhp,
            self.psp_percent,
            Some(self.memory_references),
            Some(self.page_walks),
            Some(self.page_faults),
            Some(self.dram_read_gb),
            Some(self.dram_write_gb),
            Some(self.max_link_utilisation_percent),
            Some(self.migrated_pages),
            Some(self.splits),
            Some(self.promotions),
            Some(self.policy_ms),
            Some(self.host_seconds),
        ]
    }
}

/// The measurements of one real run (`kind = "real"`): wall-clock time, as hyperfine times a
/// command, and the CPU time of the command's processes (`getrusage(RUSAGE_CHILDREN)`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RealMetrics {
    pub wall_ms: f64,
    pub user_ms: f64,
    pub sys_ms: f64,
}

/// Column names of [`RealMetrics`], in order.
pub const REAL_COLUMNS: [&str; 3] = ["wall_ms", "user_ms", "sys_ms"];

/// One row: a run of a configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Row {
    pub config: String,
    /// The axes' values (not their labels), in the grid's axis order.
    pub axes: Vec<String>,
    pub repeat: u64,
    pub seed: u64,
    /// "ok" or "failed".
    pub status: String,
    pub error: Option<String>,
    pub metrics: Option<RunMetrics>,
    /// A real run's measurements (real-run studies only).
    #[serde(default)]
    pub real: Option<RealMetrics>,
}

/// The column names: config, the axes, repeat, seed, status, error, the metrics (a
/// simulation's [`METRIC_COLUMNS`] or a real run's [`REAL_COLUMNS`]).
pub fn columns(axis_keys: &[String], kind: StudyKind) -> Vec<String> {
    let mut c = vec!["config".to_string()];
    c.extend(axis_keys.iter().cloned());
    c.extend(["repeat", "seed", "status", "error"].map(String::from));
    match kind {
        StudyKind::Sim => c.extend(METRIC_COLUMNS.iter().map(|s| s.to_string())),
        StudyKind::Real => c.extend(REAL_COLUMNS.iter().map(|s| s.to_string())),
    }
    c
}

/// A row's metric values in the order of [`columns`]' metric part (a simulation's or a real
/// run's; `None` where the run failed).
pub(crate) fn metric_values(r: &Row, kind: StudyKind) -> Vec<Option<f64>> {
    match kind {
        StudyKind::Sim => r
            .metrics
            .as_ref()
            .map_or([None; METRICS], RunMetrics::values)
            .to_vec(),
        StudyKind::Real => match &r.real {
            Some(m) => vec![Some(m.wall_ms), Some(m.user_ms), Some(m.sys_ms)],
            None => vec![None; REAL_COLUMNS.len()],
        },
    }
}

/// Write the rows as CSV (empty cells for missing values).
pub fn write_csv(path: &Path, axis_keys: &[String], kind: StudyKind, rows: &[Row]) -> Result<()> {
    with_temp(path, |tmp| {
        let mut w =
            csv::Writer::from_path(tmp).with_context(|| format!("writing {}", path.display()))?;
        w.write_record(columns(axis_keys, kind))?;
        for r in rows {
            let mut rec = vec![r.config.clone()];
            rec.extend(r.axes.iter().cloned());
            rec.extend([
                r.repeat.to_string(),
                r.seed.to_string(),
                r.status.clone(),
                r.error.clone().unwrap_or_default(),
            ]);
            rec.extend(
                metric_values(r, kind)
                    .iter()
                    .map(|v| v.map_or(String::new(), |v| v.to_string())),
            );
            w.write_record(&rec)?;
        }
        w.flush()?;
        Ok(())
    })
}

/// The rows as one Arrow record batch (strings, unsigned integers, nullable doubles), its
/// columns named by [`columns`] as the CSV's are.
pub fn record_batch(axis_keys: &[String], kind: StudyKind, rows: &[Row]) -> Result<RecordBatch> {
    let text = |vals: Vec<Option<String>>| Arc::new(StringArray::from(vals)) as ArrayRef;
    let uint = |f: fn(&Row) -> u64| {
        Arc::new(UInt64Array::from_iter_values(rows.iter().map(f))) as ArrayRef
    };
    // (array, nullable) in column order
    let mut arrays = vec![(
        text(rows.iter().map(|r| Some(r.config.clone())).collect()),
        false,
    )];
    for i in 0..axis_keys.len() {
        arrays.push((
            text(rows.iter().map(|r| r.axes.get(i).cloned()).collect()),
            false,
        ));
    }
    arrays.push((uint(|r| r.repeat), false));
    arrays.push((uint(|r| r.seed), false));
    arrays.push((
        text(rows.iter().map(|r| Some(r.status.clone())).collect()),
        false,
    ));
    arrays.push((text(rows.iter().map(|r| r.error.clone()).collect()), true));
    let values: Vec<Vec<Option<f64>>> = rows.iter().map(|r| metric_values(r, kind)).collect();
    let metrics = columns(axis_keys, kind).len() - 5 - axis_keys.len();
    for j in 0..metrics {
        let col = Float64Array::from(values.iter().map(|v| v[j]).collect::<Vec<_>>());
        arrays.push((Arc::new(col) as ArrayRef, true));
    }
    let named = columns(axis_keys, kind)
        .into_iter()
        .zip(arrays)
        .map(|(name, (array, nullable))| (name, array, nullable));
    Ok(RecordBatch::try_from_iter_with_nullable(named)?)
}

/// Write the rows as one Parquet file.
pub fn write_parquet(
    path: &Path,
    axis_keys: &[String],
    kind: StudyKind,
    rows: &[Row],
) -> Result<()> {
    let batch = record_batch(axis_keys, kind, rows)?;
    with_temp(path, |tmp| {
        let f =
            std::fs::File::create(tmp).with_context(|| format!("writing {}", path.display()))?;
        let mut w = parquet::arrow::ArrowWriter::try_new(f, batch.schema(), None)?;
        w.write(&batch)?;
        w.close()?;
        Ok(())
    })
}
