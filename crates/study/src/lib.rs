//! Studies: grids of simulated or real runs described by a TOML file (docs/study.md).
//!
//! A study file names the settings every configuration starts from (`[defaults]`, `numalab
//! sim`'s options) and its axes (`[[axis]]`: a setting and its values, with optional labels);
//! the grid is the axes' Cartesian product, each configuration run `repeats` times with seeds
//! 1..N. [`run::run`] simulates the configurations not yet done on a thread pool, writing each
//! run's record under `DIR/runs/` as it finishes (so an interrupted study resumes where it
//! stopped, and a failed configuration is recorded without stopping the others), then writes
//! the results table as Parquet and CSV and a snapshot of the environment.
//!
//! Code map: [`file`] (the TOML format and its checks), [`grid`] (configurations and their
//! keys), [`run`] (running and resuming), [`table`] (one row per run: every axis and metric;
//! Parquet and CSV), [`environment`] (what the results were produced on), [`report`] (the
//! HTML report), [`real`] (real runs: kernel settings set and restored, timing, statistics),
//! [`slurm`] (a study's runs as a Slurm job array of shards, collected afterwards).

pub mod environment;
pub mod file;
pub mod grid;
pub mod real;
pub mod report;
pub mod run;
pub mod slurm;
pub mod table;

pub use file::{sampler_off_problem, StudyFile, StudyKind};
pub use grid::{Config, Grid};
pub use run::{collect, pending, run, run_shard, Outcome, RunOptions, Shard, ShardOutcome};
