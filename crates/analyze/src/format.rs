//! numalab sample files: Apache Arrow IPC streams.
//!
//! Why Arrow IPC: it is columnar (each field compresses and scans on its own), streamable
//! (the stream format is written front to back with no footer, so a recording can be cut
//! short and still read, and a reader needs one record batch in memory at a time), and
//! pyarrow, polars and pandas read it without numalab code (`pyarrow.ipc.open_stream`,
//! `polars.read_ipc_stream`). Only the `arrow-ipc`/`arrow-array`/`arrow-schema` crates are used,
//! without compression features, to keep the build small.
//!
//! Two streams, two schemas (docs/analyze.md has the column tables):
//! - samples (`numalab.format = samples`): one row per `AccessSample`, nullable where a field
//!   can be unknown (page node, page size, data source, latency, read/write), optional perf
//!   columns (event, ip, phys_addr, weight, data_src), and [`FileMeta`] as JSON in the schema
//!   metadata (`numalab.meta`) with the common keys also as plain entries;
//! - placement (`numalab.format = placement`): runs of pages on a node at a time, the ground
//!   truth of where pages were; by convention beside the samples as `X.placement.arrows`.

use crate::error::Error;
use crate::record::{
    Batch, FileMeta, Known, Mapping, Placement, PlacementEntry, Record, Row, SampleSource,
};
use arrow_array::builder::{
    BooleanBuilder, Float32Builder, Int8Builder, UInt16Builder, UInt32Builder, UInt64Builder,
    UInt8Builder,
};
use arrow_array::types::Int8Type;
use arrow_array::{
    Array, ArrayRef, BooleanArray, DictionaryArray, Float32Array, RecordBatch, StringArray,
    UInt16Array, UInt32Array, UInt64Array, UInt8Array,
};
use arrow_buffer::NullBuffer;
use arrow_ipc::reader::StreamReader;
use arrow_ipc::writer::StreamWriter;
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef};
use numalab_core::{AccessSample, CpuId, DataSource, NodeId, PageSize, TaskId, ThreadId};
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Schema metadata key naming the stream kind.
pub const FORMAT_KEY: &str = "numalab.format";
pub const VERSION_KEY: &str = "numalab.format_version";
pub const META_KEY: &str = "numalab.meta";
pub const FORMAT_VERSION: &str = "1";

/// Rows per record batch by default: large enough for columnar scans, small enough (a few MB)
/// to keep readers' memory flat.
pub const DEFAULT_BATCH_ROWS: usize = 65_536;

/// Names of the `source` dictionary values, in `DataSource` order; the same strings as the
/// core type's serde names, so JSON and Arrow agree. The last says that the sample is not a
/// memory access at all (a page fault: `Known::NOT_ACCESS`); null is an access whose source
/// is unknown.
const SOURCE_NAMES: [&str; 6] = [
    "private-cache",
    "local-llc",
    "remote-cache",
    "local-dram",
    "remote-dram",
    NOT_AN_ACCESS,
];
const NOT_AN_ACCESS: &str = "not-an-access";
const NOT_AN_ACCESS_KEY: i8 = 5;

/// Dictionary key of a source: its index in [`Row::SOURCES`], the order of `SOURCE_NAMES`.
fn source_index(s: DataSource) -> i8 {
    Row::source_index(s) as i8
}

fn source_of_name(name: &str) -> Option<DataSource> {
    Some(match name {
        "private-cache" => DataSource::PrivateCache,
        "local-llc" => DataSource::LocalLlc,
        "remote-cache" => DataSource::RemoteCache,
        "local-dram" => DataSource::LocalDram,
        "remote-dram" => DataSource::RemoteDram,
        _ => return None,
    })
}

fn page_size_of_shift(shift: u8) -> Option<PageSize> {
    PageSize::ALL
        .into_iter()
        .find(|p| p.shift() == shift as u32)
}

/// The conventional placement file beside a sample file: `run.arrows` → `run.placement.arrows`.
pub fn placement_path_for(samples: &Path) -> PathBuf {
    let s = samples.to_string_lossy();
    match s.strip_suffix(".arrows") {
        Some(stem) => PathBuf::from(format!("{stem}.placement.arrows")),
        None => PathBuf::from(format!("{s}.placement.arrows")),
    }
}

/// The sample schema; `perf_columns` adds event, ip, phys_addr, weight, data_src and period.
pub fn sample_schema(meta: &FileMeta, perf_columns: bool) -> Result<Schema, Error> {
    let mut fields = vec![
        Field::new("time_ns", DataType::UInt64, false),
        Field::new("task", DataType::UInt32, false),
        Field::new("thread", DataType::UInt32, false),
        Field::new("cpu", DataType::UInt32, true),
        Field::new("cpu_node", DataType::UInt16, true),
        Field::new("addr", DataType::UInt64, false),
        Field::new("page_node", DataType::UInt16, true),
        Field::new("page_shift", DataType::UInt8, true),
        Field::new(
            "source",
            DataType::Dictionary(Box::new(DataType::Int8), Box::new(DataType::Utf8)),
            true,
        ),
        Field::new("latency_ns", DataType::Float32, true),
        Field::new("write", DataType::Boolean, true),
    ];
    if perf_columns {
        fields.extend([
            Field::new("event", DataType::UInt16, false),
            Field::new("ip", DataType::UInt64, true),
            Field::new("phys_addr", DataType::UInt64, true),
            Field::new("weight", DataType::UInt64, true),
            Field::new("data_src", DataType::UInt64, true),
            Field::new("period", DataType::UInt64, true),
        ]);
    }
    let json = serde_json::to_string(meta)
        .map_err(|e| Error::new("", format!("cannot encode file metadata: {e}")))?;
    let mut md = HashMap::new();
    md.insert(FORMAT_KEY.to_string(), "samples".to_string());
    md.insert(VERSION_KEY.to_string(), FORMAT_VERSION.to_string());
    md.insert(META_KEY.to_string(), json);
    // Plain copies of the common keys, for notebooks that do not parse the JSON.
    md.insert("machine".into(), meta.machine.clone());
    md.insert("workload".into(), meta.workload.clone());
    md.insert("origin".into(), meta.origin.clone());
    md.insert("sample_period".into(), meta.sample_period.to_string());
    md.insert(
        "page_size".into(),
        meta.page_size.map_or(String::new(), |p| p.to_string()),
    );
    md.insert("nodes".into(), meta.nodes.to_string());
    Ok(Schema::new_with_metadata(fields, md))
}

/// Options of a [`SampleWriter`].
#[derive(Copy, Clone, Debug)]
pub struct WriterOptions {
    /// Write the perf columns (event, ip, phys_addr, weight, data_src).
    pub perf_columns: bool,
    pub batch_rows: usize,
}

impl Default for WriterOptions {
    fn default() -> Self {
        WriterOptions {
            perf_columns: false,
            batch_rows: DEFAULT_BATCH_ROWS,
        }
    }
}

/// Writes samples as an Arrow IPC stream, one record batch every `batch_rows` rows.
pub struct SampleWriter<W: Write> {
    path: PathBuf,
    writer: StreamWriter<W>,
    schema: SchemaRef,
    opts: WriterOptions,
    pending: Vec<Record>,
    /// One dictionary for every batch, so the IPC writer sends it once.
    source_values: ArrayRef,
    rows: u64,
}

impl SampleWriter<BufWriter<File>> {
    pub fn create(
        path: impl AsRef<Path>,
        meta: &FileMeta,
        opts: WriterOptions,
    ) -> Result<Self, Error> {
        let path = path.as_ref();
        let f = File::create(path).map_err(|e| Error::new(path, format!("cannot create: {e}")))?;
        SampleWriter::new(BufWriter::new(f), path, meta, opts)
    }
}

impl<W: Write> SampleWriter<W> {
    /// A writer on any byte sink; `path` only names it in errors.
    pub fn new(
        sink: W,
        path: impl AsRef<Path>,
        meta: &FileMeta,
        opts: WriterOptions,
    ) -> Result<Self, Error> {
        let path = path.as_ref().to_path_buf();
        let schema = Arc::new(sample_schema(meta, opts.perf_columns)?);
        let writer = StreamWriter::try_new(sink, &schema)
            .map_err(|e| Error::new(&path, format!("cannot write Arrow schema: {e}")))?;
        Ok(SampleWriter {
            path,
            writer,
            schema,
            opts: WriterOptions {
                batch_rows: opts.batch_rows.max(1),
                ..opts
            },
            pending: Vec::new(),
            source_values: Arc::new(StringArray::from(SOURCE_NAMES.to_vec())),
            rows: 0,
        })
    }

    pub fn push(&mut self, r: &Record) -> Result<(), Error> {
        self.pending.push(*r);
        if self.pending.len() >= self.opts.batch_rows {
            self.flush_batch()?;
        }
        Ok(())
    }

    /// A fully known sample (the simulator's).
    pub fn push_sample(&mut self, s: &AccessSample) -> Result<(), Error> {
        self.push(&Record::from_sample(*s))
    }

    /// Rows written so far (including those not yet flushed).
    pub fn rows(&self) -> u64 {
        self.rows + self.pending.len() as u64
    }

    fn flush_batch(&mut self) -> Result<(), Error> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let batch = self.build_batch()?;
        self.writer
            .write(&batch)
            .map_err(|e| Error::new(&self.path, format!("cannot write record batch: {e}")))?;
        self.rows += self.pending.len() as u64;
        self.pending.clear();
        Ok(())
    }

    fn build_batch(&self) -> Result<RecordBatch, Error> {
        let n = self.pending.len();
        let mut time = UInt64Builder::with_capacity(n);
        let mut task = UInt32Builder::with_capacity(n);
        let mut thread = UInt32Builder::with_capacity(n);
        let mut cpu = UInt32Builder::with_capacity(n);
        let mut cpu_node = UInt16Builder::with_capacity(n);
        let mut addr = UInt64Builder::with_capacity(n);
        let mut page_node = UInt16Builder::with_capacity(n);
        let mut page_shift = UInt8Builder::with_capacity(n);
        let mut source = Int8Builder::with_capacity(n);
        let mut latency = Float32Builder::with_capacity(n);
        let mut write = BooleanBuilder::with_capacity(n);
        for r in &self.pending {
            let s = &r.sample;
            time.append_value(s.time_ns);
            task.append_value(s.task.0);
            thread.append_value(s.thread.0);
            cpu.append_option(r.cpu().map(|c| c.0));
            cpu_node.append_option(r.cpu_node().map(|n| n.0));
            addr.append_value(s.addr);
            page_node.append_option(r.page_node().map(|n| n.0));
            page_shift.append_option(r.page_size().map(|p| p.shift() as u8));
            source.append_option(if r.is_access() {
                r.source().map(source_index)
            } else {
                Some(NOT_AN_ACCESS_KEY)
            });
            latency.append_option(r.latency_ns());
            write.append_option(r.write());
        }
        let keys = source.finish();
        let source = DictionaryArray::<Int8Type>::try_new(keys, self.source_values.clone())
            .map_err(|e| Error::new(&self.path, format!("source column: {e}")))?;
        let mut cols: Vec<ArrayRef> = vec![
            Arc::new(time.finish()),
            Arc::new(task.finish()),
            Arc::new(thread.finish()),
            Arc::new(cpu.finish()),
            Arc::new(cpu_node.finish()),
            Arc::new(addr.finish()),
            Arc::new(page_node.finish()),
            Arc::new(page_shift.finish()),
            Arc::new(source),
            Arc::new(latency.finish()),
            Arc::new(write.finish()),
        ];
        if self.opts.perf_columns {
            let mut event = UInt16Builder::with_capacity(n);
            let mut ip = UInt64Builder::with_capacity(n);
            let mut phys = UInt64Builder::with_capacity(n);
            let mut weight = UInt64Builder::with_capacity(n);
            let mut dsrc = UInt64Builder::with_capacity(n);
            let mut period = UInt64Builder::with_capacity(n);
            for r in &self.pending {
                event.append_value(r.event);
                ip.append_option(r.ip);
                phys.append_option(r.phys_addr);
                weight.append_option(r.weight);
                dsrc.append_option(r.data_src);
                period.append_option(r.period);
            }
            cols.extend([
                Arc::new(event.finish()) as ArrayRef,
                Arc::new(ip.finish()),
                Arc::new(phys.finish()),
                Arc::new(weight.finish()),
                Arc::new(dsrc.finish()),
                Arc::new(period.finish()),
            ]);
        }
        RecordBatch::try_new(self.schema.clone(), cols)
            .map_err(|e| Error::new(&self.path, format!("cannot build record batch: {e}")))
    }

    /// Writes the last batch and the end-of-stream marker; returns the sink.
    pub fn finish(mut self) -> Result<W, Error> {
        self.flush_batch()?;
        self.writer
            .finish()
            .map_err(|e| Error::new(&self.path, format!("cannot finish Arrow stream: {e}")))?;
        self.writer
            .into_inner()
            .map_err(|e| Error::new(&self.path, format!("cannot flush: {e}")))
    }
}

/// Reads a sample stream one record batch at a time.
pub struct SampleReader<R: Read> {
    path: PathBuf,
    reader: StreamReader<Framed<R>>,
    meta: FileMeta,
    placement: Option<Placement>,
    /// Records read so far, and the note once the stream ended inside a batch.
    rows_read: u64,
    truncated: Option<String>,
}

impl SampleReader<BufReader<File>> {
    pub fn open(path: impl AsRef<Path>) -> Result<Self, Error> {
        let path = path.as_ref();
        let f = File::open(path).map_err(|e| Error::new(path, format!("cannot open: {e}")))?;
        if f.metadata().is_ok_and(|m| m.len() == 0) {
            return Err(Error::new(
                path,
                "the file is empty (0 bytes): no samples were written to it",
            ));
        }
        SampleReader::new(BufReader::new(f), path)
    }
}

/// The largest message body accepted: a numalab batch of 65 536 samples is about 4 MB.
const BODY_MAX_BYTES: u64 = 256 << 20;

/// The bytes of an Arrow IPC stream, passed through unchanged, each message's metadata
/// checked before the arrow reader sees it: arrow-ipc allocates a message's claimed body
/// length before reading it (2^53 bytes aborted the process: found by fuzz/arrow_samples),
/// so a metadata block that does not verify or claims a body over [`BODY_MAX_BYTES`] is an
/// I/O error here instead. A stream cut short passes what it has (the reader then stops at
/// its last whole batch).
struct Framed<R> {
    inner: R,
    /// What the schema says of the batches' buffers (`read_schema`).
    layout: Layout,
    /// Checked bytes not yet handed on, and how many were.
    pending: Vec<u8>,
    at: usize,
    /// Body bytes of the current message still to pass through.
    body_left: u64,
    /// The end-of-stream marker passed (or the source ended): pass the rest through.
    done: bool,
    /// The end-of-stream marker was read: the writer finished the stream. arrow-ipc takes a
    /// source ending between messages as the end too, so without this a file cut right after
    /// a batch read as complete.
    marker: bool,
}

impl<R: Read> Framed<R> {
    fn new(inner: R) -> Framed<R> {
        Framed {
            inner,
            layout: Layout::default(),
            pending: Vec::new(),
            at: 0,
            body_left: 0,
            done: false,
            marker: false,
        }
    }

    /// Read up to `n` bytes into `pending`; false when the source ended first.
    fn take(&mut self, n: usize) -> std::io::Result<bool> {
        let start = self.pending.len();
        self.pending.resize(start + n, 0);
        let mut got = 0;
        while got < n {
            match self.inner.read(&mut self.pending[start + got..])? {
                0 => break,
                k => got += k,
            }
        }
        self.pending.truncate(start + got);
        Ok(got == n)
    }

    /// Read the next message's prefix and metadata into `pending`; the metadata's start in
    /// it, or None when the source ended first or the end-of-stream marker came (`done`).
    fn read_message(&mut self) -> Result<Option<usize>, String> {
        self.pending.clear();
        self.at = 0;
        let io = |e: std::io::Error| format!("cannot read it: {e}");
        if !self.take(4).map_err(io)?
            || (self.pending[..4] == [0xff; 4] && !self.take(4).map_err(io)?)
        {
            self.done = true;
            return Ok(None);
        }
        let n = self.pending.len();
        let len = i32::from_le_bytes(self.pending[n - 4..].try_into().expect("4 bytes"));
        if len == 0 {
            self.done = true; // the end-of-stream marker
            self.marker = true;
            return Ok(None);
        }
        let len = usize::try_from(len)
            .ok()
            .filter(|&l| l <= SCHEMA_MAX_BYTES)
            .ok_or_else(|| format!("a message's metadata claims {len} bytes"))?;
        if !self.take(len).map_err(io)? {
            self.done = true;
            return Ok(None);
        }
        Ok(Some(n))
    }

    /// The metadata `read_message` put in `pending` from `n`, verified, and its body's
    /// length, at most [`BODY_MAX_BYTES`].
    fn message(&self, n: usize) -> Result<(arrow_ipc::Message<'_>, u64), String> {
        let msg = arrow_ipc::root_as_message(&self.pending[n..])
            .map_err(|e| format!("a message's metadata is corrupt: {e}"))?;
        let body = u64::try_from(msg.bodyLength())
            .ok()
            .filter(|&b| b <= BODY_MAX_BYTES)
            .ok_or_else(|| {
                format!(
                    "a message claims a body of {} bytes (at most {BODY_MAX_BYTES} accepted)",
                    msg.bodyLength()
                )
            })?;
        Ok((msg, body))
    }

    /// Read the stream's first message, which must be a schema arrow-ipc can decode (see
    /// [`schema_layout`]), and keep what it says of the batches' buffers. Its bytes stay in
    /// `pending` for the arrow reader.
    fn read_schema(&mut self) -> Result<(), String> {
        let Some(n) = self.read_message()? else {
            return Err(if self.pending.is_empty() {
                "the stream is empty (0 bytes)".into()
            } else {
                "the file ends inside its first message".into()
            });
        };
        let (msg, body) = self.message(n)?;
        let schema = msg
            .header_as_schema()
            .ok_or("its first message is not a schema")?;
        self.layout = schema_layout(&schema)?;
        self.body_left = body;
        Ok(())
    }

    /// Why the stream is not a numalab `want` file, its schema having failed to read for
    /// `why`. A file that does not even start like an Arrow message is said to be neither
    /// format the readers know: "the file ends inside its first message" misled about a
    /// perf.data file whose magic was damaged (the readers are picked by that magic).
    fn not_arrow(&mut self, want: &str, why: String) -> String {
        let (marker, n) = ([0xffu8; 4], self.pending.len().min(4));
        if self.pending[..n] == marker[..n] {
            return format!("not an Arrow IPC stream (expected a numalab {want} file): {why}");
        }
        // the first 8 bytes, to show a magic (only 4 may have been read)
        let short = 8usize.saturating_sub(self.pending.len());
        let _ = self.take(short);
        let first = &self.pending[..self.pending.len().min(8)];
        let hex: Vec<String> = first.iter().map(|b| format!("{b:02X}")).collect();
        let mut starts = hex.join(" ");
        if first.iter().all(|b| b.is_ascii_graphic()) {
            starts += &format!(" (\"{}\")", String::from_utf8_lossy(first));
        }
        if want == "samples" {
            format!(
                "not an Arrow IPC stream nor a perf.data file: neither numalab's Arrow samples \
                 (which start with an Arrow message, FF FF FF FF) nor perf.data (no PERFILE2 \
                 magic); it starts with {starts}"
            )
        } else {
            format!(
                "not an Arrow IPC stream (expected a numalab {want} file): it starts with \
                 {starts}, not with an Arrow message (FF FF FF FF)"
            )
        }
    }

    /// Read and check the next message (after the schema) into `pending`.
    fn next_message(&mut self) -> std::io::Result<()> {
        let invalid = |why: String| std::io::Error::new(std::io::ErrorKind::InvalidData, why);
        let Some(n) = self.read_message().map_err(invalid)? else {
            return Ok(());
        };
        let (msg, body) = self.message(n).map_err(invalid)?;
        // arrow-ipc decodes a schema met later unchecked (a field of type NONE panicked:
        // found by fuzz/arrow_samples); a stream has one, first
        if msg.header_as_schema().is_some() {
            return Err(invalid("a second schema message".into()));
        }
        // arrow-ipc unwraps a dictionary batch's data (found by fuzz/arrow_samples)
        let batch = match (
            msg.header_as_record_batch(),
            msg.header_as_dictionary_batch(),
        ) {
            (Some(b), _) => Some((b, self.layout.columns.as_slice())),
            (None, Some(d)) => {
                let data = d
                    .data()
                    .ok_or_else(|| invalid("a dictionary batch without its data".into()))?;
                let sizes = self
                    .layout
                    .dictionaries
                    .iter()
                    .find(|(id, _)| *id == d.id())
                    .map(|(_, sizes)| std::slice::from_ref(sizes))
                    .ok_or_else(|| {
                        invalid(format!(
                            "a batch for dictionary {} that no field has",
                            d.id()
                        ))
                    })?;
                Some((data, sizes))
            }
            (None, None) => None,
        };
        if let Some((b, sizes)) = batch {
            check_batch(&b, body, sizes).map_err(invalid)?;
        }
        self.body_left = body;
        Ok(())
    }
}

/// A batch's buffers lie inside its body and its counts are not negative: arrow-ipc slices
/// the body by the buffers' offsets and lengths unchecked (a length of 2^64 − 49 024 panicked:
/// found by fuzz/arrow_samples). `fields` gives, per field, the size of a value in each of
/// its buffers (its validity bitmap first).
fn check_batch(b: &arrow_ipc::RecordBatch, body: u64, fields: &[Vec<u8>]) -> Result<(), String> {
    if b.length() < 0 {
        return Err(format!("a batch claims {} rows", b.length()));
    }
    let sizes: Vec<u8> = fields.iter().flatten().copied().collect();
    let buffers: Vec<_> = b.buffers().into_iter().flatten().collect();
    if buffers.len() != sizes.len() {
        return Err(format!(
            "a batch has {} buffers where its schema makes {}",
            buffers.len(),
            sizes.len()
        ));
    }
    for (i, (buf, &size)) in buffers.iter().zip(&sizes).enumerate() {
        let (at, len) = (buf.offset(), buf.length());
        if len % i64::from(size) != 0 {
            return Err(format!(
                "a batch's buffer {i} ({len} bytes) does not hold whole {size}-byte values"
            ));
        }
        // the format pads every buffer to 8 bytes; arrow-ipc asserts the alignment of typed
        // buffers (a misaligned one panicked: fuzz/arrow_samples)
        if at % 8 != 0 {
            return Err(format!(
                "a batch's buffer {i} starts at offset {at}, not on an 8-byte boundary"
            ));
        }
        let inside = u64::try_from(at)
            .ok()
            .zip(u64::try_from(len).ok())
            .and_then(|(a, l)| a.checked_add(l))
            .is_some_and(|end| end <= body);
        if !inside {
            return Err(format!(
                "a batch's buffer {i} ({len} bytes at offset {at}) lies outside its {body}-byte body"
            ));
        }
    }
    // a value takes at least a bit of some buffer (numalab writes no null-typed columns): a
    // length past the body's bits is corrupt (2^61 values over a 104-byte validity buffer
    // panicked: fuzz/arrow_samples)
    let bits = body.saturating_mul(8);
    if b.length() as u64 > bits {
        return Err(format!(
            "a batch claims {} rows in a {body}-byte body",
            b.length()
        ));
    }
    let nodes: Vec<_> = b.nodes().into_iter().flatten().collect();
    if nodes.len() != fields.len() {
        return Err(format!(
            "a batch describes {} columns where its schema has {}",
            nodes.len(),
            fields.len()
        ));
    }
    let mut first_buffer = 0;
    for (column, (node, field)) in nodes.iter().zip(fields).enumerate() {
        if node.length() < 0
            || node.null_count() < 0
            || node.null_count() > node.length()
            || node.length() as u64 > bits
        {
            return Err(format!(
                "a batch's column {column} claims {} values with {} nulls",
                node.length(),
                node.null_count()
            ));
        }
        // arrow-data reads the validity bitmap of a column with nulls unchecked, one bit per
        // value (261 values over a 1-byte bitmap panicked: fuzz/arrow_samples); the values'
        // buffers are checked against the length by arrow-data's own validation
        let validity = buffers[first_buffer].length() as u64;
        let needed = (node.length() as u64).div_ceil(8);
        if node.null_count() > 0 && validity < needed {
            return Err(format!(
                "a batch's column {column} has {} nulls among {} values but a {validity}-byte \
                 validity bitmap ({needed} bytes needed)",
                node.null_count(),
                node.length()
            ));
        }
        first_buffer += field.len();
    }
    Ok(())
}

impl<R: Read> Read for Framed<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            if self.at < self.pending.len() {
                let n = buf.len().min(self.pending.len() - self.at);
                buf[..n].copy_from_slice(&self.pending[self.at..self.at + n]);
                self.at += n;
                return Ok(n);
            }
            if self.done {
                return self.inner.read(buf);
            }
            if self.body_left > 0 {
                let want = buf.len().min(self.body_left as usize);
                let n = self.inner.read(&mut buf[..want])?;
                if n == 0 {
                    self.done = true;
                }
                self.body_left -= n as u64;
                return Ok(n);
            }
            self.next_message()?;
        }
    }
}

/// The largest schema message accepted: numalab's are about 1 KiB.
const SCHEMA_MAX_BYTES: usize = 1 << 20;

/// What a schema says of its batches' buffers, if arrow-ipc can decode it: arrow-ipc unwraps
/// and panics on malformed schemas (a missing field list, an integer of an unknown width, a
/// type table the union does not hold, found by fuzz/arrow_samples), so a corrupt file must
/// be refused before it reaches it. Only the types numalab writes are accepted (integers,
/// floats, booleans, strings, and dictionaries of those).
fn schema_layout(schema: &arrow_ipc::Schema) -> Result<Layout, String> {
    use arrow_ipc::{Precision, Type};
    let fields = schema.fields().ok_or("its schema has no field list")?;
    let int_ok =
        |i: Option<arrow_ipc::Int>| i.is_some_and(|i| matches!(i.bitWidth(), 8 | 16 | 32 | 64));
    let mut layout = Layout::default();
    for (n, f) in fields.iter().enumerate() {
        let name = f.name().unwrap_or("?");
        let what = |why: &str| format!("schema field {n} ('{name}') {why}");
        if let Some(d) = f.dictionary() {
            if !int_ok(d.indexType()) {
                return Err(what("has a dictionary without a valid index type"));
            }
        }
        // the sizes of the values in each of the field's buffers (validity first; 1 for bitmaps
        // and bytes)
        let values: Option<Vec<u8>> = match f.type_type() {
            Type::Bool => Some(vec![1, 1]),
            Type::Utf8 => Some(vec![1, 4, 1]),
            Type::Int => f
                .type_as_int()
                .filter(|i| int_ok(Some(*i)))
                .map(|i| vec![1, (i.bitWidth() / 8) as u8]),
            Type::FloatingPoint => f
                .type_as_floating_point()
                .and_then(|p| match p.precision() {
                    Precision::SINGLE => Some(vec![1, 4]),
                    Precision::DOUBLE => Some(vec![1, 8]),
                    _ => None,
                }),
            _ => None,
        };
        let Some(values) = values else {
            return Err(what(&format!(
                "has type {:?}, not one numalab writes (or a malformed one)",
                f.type_type()
            )));
        };
        match f.dictionary() {
            Some(d) => {
                let index = d.indexType().map_or(1, |i| (i.bitWidth() / 8) as u8);
                layout.columns.push(vec![1, index]);
                layout.dictionaries.push((d.id(), values));
            }
            None => layout.columns.push(values),
        }
    }
    Ok(layout)
}

/// What the schema says a batch's buffers hold: per field of a record batch, the size of a
/// value in each of its buffers, in order, and the same for each dictionary's batch (one
/// field), by dictionary id.
/// arrow-ipc reinterprets a buffer as whole values and asserts that it divides evenly (a
/// buffer of i32 offsets of a length 4 does not divide panicked: found by fuzz/arrow_samples).
#[derive(Clone, Debug, Default)]
struct Layout {
    columns: Vec<Vec<u8>>,
    dictionaries: Vec<(i64, Vec<u8>)>,
}

fn stream_reader<R: Read>(
    src: R,
    path: &Path,
    want: &str,
) -> Result<StreamReader<Framed<R>>, Error> {
    let mut src = Framed::new(src);
    if let Err(why) = src.read_schema() {
        return Err(Error::new(path, src.not_arrow(want, why)));
    }
    let reader = StreamReader::try_new(src, None).map_err(|e| {
        Error::new(
            path,
            format!("not an Arrow IPC stream (expected a numalab {want} file): {e}"),
        )
    })?;
    let md = reader.schema().metadata().clone();
    match md.get(FORMAT_KEY).map(String::as_str) {
        Some(f) if f == want => {}
        Some(other) => {
            return Err(Error::new(
                path,
                format!("is a numalab '{other}' stream, expected '{want}'"),
            ))
        }
        None => {
            return Err(Error::new(
                path,
                format!("Arrow stream without the '{FORMAT_KEY}' schema metadata: not a numalab {want} file"),
            ))
        }
    }
    match md.get(VERSION_KEY).map(String::as_str) {
        Some(FORMAT_VERSION) => Ok(reader),
        v => Err(Error::new(
            path,
            format!(
                "format version {:?} is not supported (this reader reads version {FORMAT_VERSION})",
                v.unwrap_or("missing")
            ),
        )),
    }
}

impl<R: Read> SampleReader<R> {
    /// A reader on any byte source; `path` only names it in errors.
    pub fn new(src: R, path: impl AsRef<Path>) -> Result<Self, Error> {
        let path = path.as_ref().to_path_buf();
        let reader = stream_reader(src, &path, "samples")?;
        let meta = match reader.schema().metadata().get(META_KEY) {
            Some(json) => serde_json::from_str(json).map_err(|e| {
                Error::new(
                    &path,
                    format!("schema metadata '{META_KEY}' is not valid: {e}"),
                )
            })?,
            None => FileMeta::default(),
        };
        Ok(SampleReader {
            path,
            reader,
            meta,
            placement: None,
            rows_read: 0,
            truncated: None,
        })
    }

    /// Fills in page nodes unknown in the file from a placement snapshot.
    pub fn with_placement(mut self, placement: Placement) -> Self {
        self.placement = Some(placement);
        self
    }

    fn convert(&self, b: &RecordBatch) -> Result<Vec<Record>, Error> {
        let mut out = Vec::with_capacity(b.num_rows());
        self.convert_with(b, |r| out.push(*r))?;
        Ok(out)
    }

    /// Each row of `b` as a `Record`, handed to `emit` (inlined: `next_rows` turns it into a
    /// `Row` without storing the 120-byte record).
    #[inline]
    fn convert_with(&self, b: &RecordBatch, mut emit: impl FnMut(&Record)) -> Result<(), Error> {
        let path = &self.path;
        let time = column::<UInt64Array>(b, "time_ns", path)?;
        let task = column::<UInt32Array>(b, "task", path)?;
        let thread = column::<UInt32Array>(b, "thread", path)?;
        let cpu = column::<UInt32Array>(b, "cpu", path)?;
        let cpu_node = column::<UInt16Array>(b, "cpu_node", path)?;
        let addr = column::<UInt64Array>(b, "addr", path)?;
        let page_node = column::<UInt16Array>(b, "page_node", path)?;
        let page_shift = column::<UInt8Array>(b, "page_shift", path)?;
        let source = column::<DictionaryArray<Int8Type>>(b, "source", path)?;
        let latency = column::<Float32Array>(b, "latency_ns", path)?;
        let write = column::<BooleanArray>(b, "write", path)?;
        let event = opt_column::<UInt16Array>(b, "event", path)?;
        let ip = opt_column::<UInt64Array>(b, "ip", path)?;
        let phys = opt_column::<UInt64Array>(b, "phys_addr", path)?;
        let weight = opt_column::<UInt64Array>(b, "weight", path)?;
        let dsrc = opt_column::<UInt64Array>(b, "data_src", path)?;
        let period = opt_column::<UInt64Array>(b, "period", path)?;
        for (name, a) in [("time_ns", time.null_count()), ("addr", addr.null_count())] {
            if a > 0 {
                return Err(Error::new(path, format!("column '{name}' has null values")));
            }
        }
        // The dictionary may come from another writer (pyarrow): map its strings once.
        let dict = source
            .values()
            .as_any()
            .downcast_ref::<StringArray>()
            .ok_or_else(|| Error::new(path, "column 'source' must be a dictionary of strings"))?;
        // None: null (unknown source); Some(None): not an access.
        let dict: Vec<Option<Option<DataSource>>> = (0..dict.len())
            .map(|i| {
                if dict.is_null(i) {
                    return Ok(None);
                }
                if dict.value(i) == NOT_AN_ACCESS {
                    return Ok(Some(None));
                }
                source_of_name(dict.value(i))
                    .map(|s| Some(Some(s)))
                    .ok_or_else(|| {
                        Error::new(
                            path,
                            format!(
                                "column 'source' has unknown value '{}' (expected one of {})",
                                dict.value(i),
                                SOURCE_NAMES.join(", ")
                            ),
                        )
                    })
            })
            .collect::<Result<_, _>>()?;
        let keys = source.keys();
        // Plain slices and null bitmaps: the per-row accessors of arrow-array are not inlined
        // across crates, and this loop runs once per sample.
        let valid = |n: Option<&NullBuffer>, i: usize| n.is_none_or(|n| n.is_valid(i));
        let cpu_n = cpu.nulls();
        let (time_v, task_v, thread_v, cpu_v, addr_v) = (
            time.values(),
            task.values(),
            thread.values(),
            cpu.values(),
            addr.values(),
        );
        let (cpu_node_v, cpu_node_n) = (cpu_node.values(), cpu_node.nulls());
        let (page_node_v, page_node_n) = (page_node.values(), page_node.nulls());
        let (shift_v, shift_n) = (page_shift.values(), page_shift.nulls());
        let (latency_v, latency_n) = (latency.values(), latency.nulls());
        let (write_v, write_n) = (write.values(), write.nulls());
        let (keys_v, keys_n) = (keys.values(), keys.nulls());
        let opt64 = |a: Option<&UInt64Array>, i: usize| {
            a.and_then(|a| valid(a.nulls(), i).then(|| a.values()[i]))
        };
        for i in 0..b.num_rows() {
            let mut known = Known::NONE;
            let mut flag = |valid: bool, k: Known| {
                if valid {
                    known = known.with(k);
                }
            };
            flag(valid(cpu_n, i), Known::CPU);
            flag(valid(cpu_node_n, i), Known::CPU_NODE);
            flag(valid(page_node_n, i), Known::PAGE_NODE);
            flag(valid(latency_n, i), Known::LATENCY);
            flag(valid(write_n, i), Known::WRITE);
            let page_size = if valid(shift_n, i) {
                let shift = shift_v[i];
                let p = page_size_of_shift(shift).ok_or_else(|| {
                    Error::new(
                        path,
                        format!("row {i}: page_shift {shift} is not 12, 21 or 30"),
                    )
                })?;
                known = known.with(Known::PAGE_SIZE);
                p
            } else {
                PageSize::Base4K
            };
            let src = if valid(keys_n, i) {
                let k = keys_v[i];
                let s = usize::try_from(k)
                    .ok()
                    .and_then(|k| dict.get(k).copied())
                    .ok_or_else(|| {
                        Error::new(
                            path,
                            format!("row {i}: source key {k} outside its dictionary"),
                        )
                    })?;
                match s {
                    Some(Some(_)) => known = known.with(Known::SOURCE),
                    Some(None) => known = known.with(Known::NOT_ACCESS),
                    None => {}
                }
                s.flatten()
            } else {
                None
            };
            let mut rec = Record {
                sample: AccessSample {
                    time_ns: time_v[i],
                    task: TaskId(task_v[i]),
                    thread: ThreadId(thread_v[i]),
                    cpu: CpuId(cpu_v[i]),
                    cpu_node: NodeId(cpu_node_v[i]),
                    addr: addr_v[i],
                    page_node: NodeId(page_node_v[i]),
                    page_size,
                    source: src.unwrap_or(DataSource::LocalDram),
                    latency_ns: latency_v[i],
                    write: write_v.value(i),
                },
                known,
                event: event.map_or(0, |e| e.values()[i]),
                ip: opt64(ip, i),
                phys_addr: opt64(phys, i),
                weight: opt64(weight, i),
                data_src: opt64(dsrc, i),
                period: opt64(period, i),
            };
            if !known.has(Known::PAGE_NODE) {
                if let Some(p) = &self.placement {
                    p.annotate(&mut rec);
                }
            }
            emit(&rec);
        }
        Ok(())
    }
}

impl<R: Read> SampleReader<R> {
    /// The next record batch; a stream that ends inside one (a file cut short, as `perf
    /// script` tolerates) ends the reading there, noted in `truncated`, and any other
    /// failure is an error naming what is wrong.
    fn next_record_batch(&mut self) -> Result<Option<RecordBatch>, Error> {
        if self.truncated.is_some() {
            return Ok(None);
        }
        match self.reader.next() {
            // the source ended between messages: the writer never finished the stream
            None if !self.reader.get_ref().marker => {
                self.note_cut(" (the stream lacks its end-of-stream marker)");
                Ok(None)
            }
            None => Ok(None),
            Some(Err(ArrowError::IoError(_, e)))
                if e.kind() == std::io::ErrorKind::UnexpectedEof =>
            {
                self.note_cut("");
                Ok(None)
            }
            Some(Err(e)) => Err(Error::new(
                &self.path,
                format!("corrupt record batch after {} records: {e}", self.rows_read),
            )),
            Some(Ok(b)) => {
                self.rows_read += b.num_rows() as u64;
                Ok(Some(b))
            }
        }
    }

    /// Ends the reading as cut short, saying where and after how many records, then `how`.
    fn note_cut(&mut self, how: &str) {
        let read = self.rows_read;
        self.truncated = Some(match std::fs::metadata(&self.path) {
            Ok(m) => format!("truncated at byte {}: {read} records read{how}", m.len()),
            Err(_) => format!("truncated: {read} records read{how}"),
        });
    }
}

impl<R: Read> SampleSource for SampleReader<R> {
    fn meta(&self) -> &FileMeta {
        &self.meta
    }

    fn next_batch(&mut self) -> Result<Option<Batch>, Error> {
        match self.next_record_batch()? {
            None => Ok(None),
            Some(b) => Ok(Some(Batch {
                records: self.convert(&b)?,
                mappings: Vec::new(),
                thread_names: Vec::new(),
            })),
        }
    }

    fn next_rows(&mut self, rows: &mut Vec<Row>, _: &mut Vec<Mapping>) -> Result<bool, Error> {
        match self.next_record_batch()? {
            None => Ok(false),
            Some(b) => {
                rows.reserve(b.num_rows());
                self.convert_with(&b, |r| rows.push(Row::from_record(r)))?;
                Ok(true)
            }
        }
    }

    fn truncated(&self) -> Option<String> {
        self.truncated.clone()
    }
}

fn opt_column<'a, T: 'static>(
    b: &'a RecordBatch,
    name: &str,
    path: &Path,
) -> Result<Option<&'a T>, Error> {
    match b.column_by_name(name) {
        None => Ok(None),
        Some(c) => c.as_any().downcast_ref::<T>().map(Some).ok_or_else(|| {
            Error::new(
                path,
                format!(
                    "column '{name}' has type {}, expected {}",
                    c.data_type(),
                    std::any::type_name::<T>()
                        .rsplit("::")
                        .next()
                        .unwrap_or("?")
                ),
            )
        }),
    }
}

fn column<'a, T: 'static>(b: &'a RecordBatch, name: &str, path: &Path) -> Result<&'a T, Error> {
    opt_column(b, name, path)?
        .ok_or_else(|| Error::new(path, format!("column '{name}' is missing")))
}

/// The placement schema.
pub fn placement_schema() -> Schema {
    let mut md = HashMap::new();
    md.insert(FORMAT_KEY.to_string(), "placement".to_string());
    md.insert(VERSION_KEY.to_string(), FORMAT_VERSION.to_string());
    Schema::new_with_metadata(
        vec![
            Field::new("time_ns", DataType::UInt64, false),
            Field::new("task", DataType::UInt32, false),
            Field::new("start", DataType::UInt64, false),
            Field::new("page_shift", DataType::UInt8, false),
            Field::new("pages", DataType::UInt32, false),
            Field::new("node", DataType::UInt16, false),
        ],
        md,
    )
}

/// Writes placement entries as an Arrow IPC stream (one batch per `write` call).
pub struct PlacementWriter<W: Write> {
    path: PathBuf,
    writer: StreamWriter<W>,
    schema: SchemaRef,
}

impl PlacementWriter<BufWriter<File>> {
    pub fn create(path: impl AsRef<Path>) -> Result<Self, Error> {
        let path = path.as_ref();
        let f = File::create(path).map_err(|e| Error::new(path, format!("cannot create: {e}")))?;
        PlacementWriter::new(BufWriter::new(f), path)
    }
}

impl<W: Write> PlacementWriter<W> {
    pub fn new(sink: W, path: impl AsRef<Path>) -> Result<Self, Error> {
        let path = path.as_ref().to_path_buf();
        let schema = Arc::new(placement_schema());
        let writer = StreamWriter::try_new(sink, &schema)
            .map_err(|e| Error::new(&path, format!("cannot write Arrow schema: {e}")))?;
        Ok(PlacementWriter {
            path,
            writer,
            schema,
        })
    }

    /// Writes one snapshot (or any set of entries) as one record batch.
    pub fn write(&mut self, entries: &[PlacementEntry]) -> Result<(), Error> {
        if entries.is_empty() {
            return Ok(());
        }
        let cols: Vec<ArrayRef> = vec![
            Arc::new(UInt64Array::from_iter_values(
                entries.iter().map(|e| e.time_ns),
            )),
            Arc::new(UInt32Array::from_iter_values(
                entries.iter().map(|e| e.task.0),
            )),
            Arc::new(UInt64Array::from_iter_values(
                entries.iter().map(|e| e.start),
            )),
            Arc::new(UInt8Array::from_iter_values(
                entries.iter().map(|e| e.page_size.shift() as u8),
            )),
            Arc::new(UInt32Array::from_iter_values(
                entries.iter().map(|e| e.pages),
            )),
            Arc::new(UInt16Array::from_iter_values(
                entries.iter().map(|e| e.node.0),
            )),
        ];
        let batch = RecordBatch::try_new(self.schema.clone(), cols)
            .map_err(|e| Error::new(&self.path, format!("cannot build record batch: {e}")))?;
        self.writer
            .write(&batch)
            .map_err(|e| Error::new(&self.path, format!("cannot write record batch: {e}")))
    }

    pub fn finish(mut self) -> Result<W, Error> {
        self.writer
            .finish()
            .map_err(|e| Error::new(&self.path, format!("cannot finish Arrow stream: {e}")))?;
        self.writer
            .into_inner()
            .map_err(|e| Error::new(&self.path, format!("cannot flush: {e}")))
    }
}

/// Reads a placement stream.
pub struct PlacementReader;

impl PlacementReader {
    pub fn open(path: impl AsRef<Path>) -> Result<Placement, Error> {
        let path = path.as_ref();
        let f = File::open(path).map_err(|e| Error::new(path, format!("cannot open: {e}")))?;
        PlacementReader::read(BufReader::new(f), path)
    }

    /// Reads every entry (placement is looked up by address, so it is kept in memory; runs of
    /// pages keep it small).
    pub fn read<R: Read>(src: R, path: impl AsRef<Path>) -> Result<Placement, Error> {
        let path = path.as_ref();
        let reader = stream_reader(src, path, "placement")?;
        let mut entries = Vec::new();
        for b in reader {
            let b =
                b.map_err(|e| Error::new(path, format!("corrupt or truncated record batch: {e}")))?;
            let time = column::<UInt64Array>(&b, "time_ns", path)?;
            let task = column::<UInt32Array>(&b, "task", path)?;
            let start = column::<UInt64Array>(&b, "start", path)?;
            let shift = column::<UInt8Array>(&b, "page_shift", path)?;
            let pages = column::<UInt32Array>(&b, "pages", path)?;
            let node = column::<UInt16Array>(&b, "node", path)?;
            for i in 0..b.num_rows() {
                let page_size = page_size_of_shift(shift.value(i)).ok_or_else(|| {
                    Error::new(
                        path,
                        format!("row {i}: page_shift {} is not 12, 21 or 30", shift.value(i)),
                    )
                })?;
                entries.push(PlacementEntry {
                    time_ns: time.value(i),
                    task: TaskId(task.value(i)),
                    start: start.value(i),
                    page_size,
                    pages: pages.value(i),
                    node: NodeId(node.value(i)),
                });
            }
        }
        Ok(Placement::from_entries(entries))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The dictionary's strings and `Row::SOURCES` must list the sources in one order (the
    /// dictionary key is the row's source index), and the strings must be serde's names.
    #[test]
    fn source_names_follow_row_sources() {
        for (i, s) in Row::SOURCES.iter().enumerate() {
            assert_eq!(source_index(*s), i as i8);
            let name = serde_json::to_value(s).expect("serialises");
            assert_eq!(name.as_str(), Some(SOURCE_NAMES[i]));
        }
    }
}
