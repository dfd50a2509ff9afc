//! How a row is timed (docs/benchmark.md, "The metrics"), and the copy roofline.
//!
//! Default (`--l2 rotate`): the row's inputs exist in several copies whose
//! total is ≥ 4× the L2, and consecutive launches use different copies, so
//! no launch finds its data in L2; nothing is written between timed launches.
//! A busy-wait kernel is enqueued first, so the timed launches are queued
//! while the GPU is busy and then run back to back: host launch latency is
//! not timed. Each launch sits between its own CUDA events.
//!
//! `--l2 flush` is the previous method, kept for comparison: one copy of the
//! inputs, 4× L2 of memset right before every launch (outside the events).
//! Its dirty lines are written back while the kernel runs, charging it
//! 4-10 µs, so it understates small rows.

use std::time::Duration;

use decode_attn::cust::event::{Event, EventFlags, EventStatus};
use decode_attn::cust::memory::DeviceBuffer;
use decode_attn::cust::stream::Stream;
use decode_attn::cust::sys as cuda;
use decode_attn::{DecodeAttention, Plan, Workspace};

use crate::buffers::{cuda, BufferSet};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum L2Mode {
    /// Rotate among input copies totalling ≥ 4× L2; no writes between launches.
    Rotate,
    /// Memset 4× L2 before each launch (the old method; charges write-backs).
    Flush,
}

pub fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn event() -> Result<Event, String> {
    Event::new(EventFlags::DEFAULT).map_err(|e| e.to_string())
}

fn elapsed_us(from: &Event, to: &Event) -> Result<f64, String> {
    to.elapsed_time_f32(from).map(|ms| ms as f64 * 1e3).map_err(|e| e.to_string())
}

/// Device-to-device copy of 4 GiB: (bytes read + bytes written) / median time.
pub fn roofline(attn: &DecodeAttention, stream: &Stream) -> Result<f64, String> {
    let bytes: usize = 4 << 30;
    let src = DeviceBuffer::<u8>::zeroed(bytes).map_err(|e| e.to_string())?;
    let dst = DeviceBuffer::<u8>::zeroed(bytes).map_err(|e| e.to_string())?;
    let (s, d) = (src.as_device_ptr().as_raw(), dst.as_device_ptr().as_raw());
    // SAFETY: both buffers hold `bytes` bytes.
    let copy = || cuda(unsafe { cuda::cuMemcpyDtoDAsync_v2(d, s, bytes, stream.as_inner()) }, "cuMemcpyDtoDAsync");
    for _ in 0..2 {
        copy()?;
    }
    let iters = 20;
    let (starts, stops): (Vec<Event>, Vec<Event>) = ((0..iters).map(|_| event()).collect::<Result<_, _>>()?, (0..iters).map(|_| event()).collect::<Result<_, _>>()?);
    decode_attn::testing::gpu_sleep(attn, Duration::from_millis(2), stream).map_err(|e| e.to_string())?;
    for i in 0..iters {
        starts[i].record(stream).map_err(|e| e.to_string())?;
        copy()?;
        stops[i].record(stream).map_err(|e| e.to_string())?;
    }
    stream.synchronize().map_err(|e| e.to_string())?;
    let t: Vec<f64> = (0..iters).map(|i| elapsed_us(&starts[i], &stops[i])).collect::<Result<_, _>>()?;
    Ok(2.0 * bytes as f64 / (median(&t) * 1e-6) / 1e9)
}

/// Per-launch times of one row, in µs.
pub struct Timings {
    /// Whole step (split sequences are merged inside the attention kernel).
    pub total: Vec<f64>,
    /// Whether every timed launch was enqueued before the GPU ran out of
    /// work (rotate mode); false means host latency may be in the numbers.
    pub queued_ahead: bool,
}

/// What the timed loop needs besides the plan.
pub struct TimedRun<'a> {
    pub attn: &'a DecodeAttention,
    pub stream: &'a Stream,
    pub plan: &'a Plan,
    pub ws: &'a mut Workspace,
    pub iters: usize,
}

impl TimedRun<'_> {
    fn launch(&mut self, set: &mut BufferSet) -> Result<(), String> {
        let (q, cache, o) = set.views();
        self.attn.run(self.plan, q, &cache, o, self.ws, self.stream).map_err(|e| e.to_string())
    }

    /// Times `iters` launches over `sets` in turn (see the module docs).
    pub fn rotate(&mut self, sets: &mut [BufferSet]) -> Result<Timings, String> {
        for set in sets.iter_mut() {
            self.launch(set)?; // warm-up: module, metadata, TLBs
        }
        self.stream.synchronize().map_err(|e| e.to_string())?;
        // Host enqueue costs ~10-30 µs a launch; sleep well past that, and
        // longer again if the queue still ran dry.
        let mut sleep = Duration::from_micros(2000 + 40 * self.iters as u64);
        for _attempt in 0..3 {
            let t = self.timed(sets, Some(sleep))?;
            if t.queued_ahead {
                return Ok(t);
            }
            sleep *= 4;
        }
        let mut t = self.timed(sets, Some(sleep))?;
        t.queued_ahead = false;
        Ok(t)
    }

    /// The old method: one set, `flush` memset before each launch.
    pub fn flush(&mut self, set: &mut BufferSet, flush: &DeviceBuffer<u32>) -> Result<Timings, String> {
        self.launch(set)?;
        let mut t = Timings { total: Vec::new(), queued_ahead: true };
        let (start, stop) = (event()?, event()?);
        for _ in 0..self.iters {
            // SAFETY: memset of the flush buffer's own words.
            cuda(unsafe { cuda::cuMemsetD32Async(flush.as_device_ptr().as_raw(), 0x3F80_0000, flush.len(), self.stream.as_inner()) }, "cuMemsetD32Async")?;
            start.record(self.stream).map_err(|e| e.to_string())?;
            self.launch(set)?;
            stop.record(self.stream).map_err(|e| e.to_string())?;
            stop.synchronize().map_err(|e| e.to_string())?;
            t.total.push(elapsed_us(&start, &stop)?);
        }
        Ok(t)
    }

    fn timed(&mut self, sets: &mut [BufferSet], sleep: Option<Duration>) -> Result<Timings, String> {
        let n = self.iters;
        let events = |k| (0..k).map(|_| event()).collect::<Result<Vec<_>, _>>();
        let (starts, stops) = (events(n)?, events(n)?);
        let queue_start = event()?;
        if let Some(d) = sleep {
            decode_attn::testing::gpu_sleep(self.attn, d, self.stream).map_err(|e| e.to_string())?;
        }
        queue_start.record(self.stream).map_err(|e| e.to_string())?;
        let count = sets.len();
        for i in 0..n {
            starts[i].record(self.stream).map_err(|e| e.to_string())?;
            self.launch(&mut sets[(i + 1) % count])?;
            stops[i].record(self.stream).map_err(|e| e.to_string())?;
        }
        // Still sleeping after the last enqueue: no launch waited on the host.
        let queued_ahead = matches!(queue_start.query(), Ok(EventStatus::NotReady));
        self.stream.synchronize().map_err(|e| format!("kernel failed: {e}"))?;
        let total = (0..n).map(|i| elapsed_us(&starts[i], &stops[i])).collect::<Result<_, _>>()?;
        Ok(Timings { total, queued_ahead })
    }
}

/// Per-replay times (µs) of `iters` replays, rotating over `graphs` (one
/// per buffer set), queued behind a busy-wait as the planned launches are.
pub fn time_graphs(attn: &DecodeAttention, stream: &Stream, graphs: &[crate::cuda_init::Graph], iters: usize) -> Result<Vec<f64>, String> {
    for g in graphs {
        g.launch(stream)?; // warm-up: upload the graph
    }
    stream.synchronize().map_err(|e| e.to_string())?;
    time_queued(attn, stream, iters, |i| graphs[(i + 1) % graphs.len()].launch(stream))
}

/// Per-call times (µs) of `n` calls of `launch(i)`, each between its own
/// events, all queued behind a busy-wait so the host's enqueue pace is not
/// timed (the caller warms up and synchronizes first).
pub fn time_queued(attn: &DecodeAttention, stream: &Stream, n: usize, mut launch: impl FnMut(usize) -> Result<(), String>) -> Result<Vec<f64>, String> {
    let events = |k| (0..k).map(|_| event()).collect::<Result<Vec<_>, _>>();
    let (starts, stops) = (events(n)?, events(n)?);
    decode_attn::testing::gpu_sleep(attn, Duration::from_micros(2000 + 40 * n as u64), stream).map_err(|e| e.to_string())?;
    for i in 0..n {
        starts[i].record(stream).map_err(|e| e.to_string())?;
        launch(i)?;
        stops[i].record(stream).map_err(|e| e.to_string())?;
    }
    stream.synchronize().map_err(|e| format!("launch failed: {e}"))?;
    (0..n).map(|i| elapsed_us(&starts[i], &stops[i])).collect()
}
