//! The bound column (docs/benchmark.md, "The bound column"): the least time
//! a row could take on this GPU, from figures measured in the same process,
//!
//!     bound = empty launch + max(bytes / copy rate,
//!                                MMA FLOPs / tensor-core rate,
//!                                conversion instructions / issue rate)
//!
//! - the empty launch: a one-thread kernel that returns at once, timed
//!   between events like the rows (queued behind a busy-wait);
//! - the copy rate: the 4 GiB device-to-device copy (`timing::roofline`);
//! - the tensor-core rate: `gpu_mma_rate`, the decode kernels' bf16 P·V
//!   `wgmma` steps in a loop on every SM (two blocks of two warpgroups);
//! - FLOPs: Q·Kᵀ and P·V over the keys the row reads, 2·rows·keys·(D + V's
//!   head dim) (`Plan::flops`: 4·rows·keys·D but for MLA's 576 + 512);
//! - conversion instructions: the narrow kernels' per-key count from their
//!   SASS at head dim 128 (inner loop per 16 keys and 8 rows: int8 and both
//!   fp8 128, int4 224 of 299 / 425 instructions; docs/perf.md, "What
//!   bounds the H200's rows"), scaled by D / 128 and the row tiles; other
//!   families' conversions are not counted (their term is 0), so the
//!   bound stays a bound;
//! - the issue rate: 4 warp instructions a cycle an SM at the driver's SM
//!   clock.

use decode_attn::cust::device::{Device, DeviceAttribute};
use decode_attn::cust::memory::DeviceBuffer;
use decode_attn::cust::stream::Stream;
use decode_attn::{DecodeAttention, Family, KvFormat, Plan};
use std::time::Duration;

use crate::timing::{median, time_queued};

/// The run's machine figures, once measured (`--bound`); rows read them.
pub static MACHINE: std::sync::OnceLock<Machine> = std::sync::OnceLock::new();

/// What the bound reads of the GPU, measured (or, the clock, reported) once a run.
#[derive(Clone, Copy, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Machine {
    pub copy_gbps: f64,
    pub empty_launch_us: f64,
    pub tensor_tflops: f64,
    /// Warp instructions a second: SMs × 4 × the SM clock.
    pub issue_ginstr_per_s: f64,
}

/// Median time (µs) of `launches` calls of `launch`, after one to warm up.
fn timed(attn: &DecodeAttention, stream: &Stream, launches: usize, mut launch: impl FnMut() -> Result<(), String>) -> Result<f64, String> {
    launch()?;
    stream.synchronize().map_err(|e| e.to_string())?;
    Ok(median(&time_queued(attn, stream, launches, |_| launch())?))
}

impl Machine {
    pub fn measure(attn: &DecodeAttention, stream: &Stream, device: u32, copy_gbps: f64) -> Result<Machine, String> {
        let empty_launch_us = timed(attn, stream, 60, || decode_attn::testing::gpu_sleep(attn, Duration::ZERO, stream).map_err(|e| e.to_string()))?;
        let sms = attn.device_info().sm_count;
        let (blocks, warpgroups, rounds) = (2 * sms, 2, 2000);
        let out = DeviceBuffer::<f32>::zeroed((blocks * warpgroups) as usize).map_err(|e| e.to_string())?;
        let us = timed(attn, stream, 10, || decode_attn::testing::mma_rate(attn, blocks, warpgroups, rounds, &out, stream).map_err(|e| e.to_string()))?;
        let flops = (blocks * warpgroups) as f64 * rounds as f64 * decode_attn_abi::MMA_RATE_FLOPS_PER_ROUND as f64;
        let clock_khz = Device::get_device(device).and_then(|d| d.get_attribute(DeviceAttribute::ClockRate)).map_err(|e| e.to_string())?;
        Ok(Machine { copy_gbps, empty_launch_us, tensor_tflops: flops / (us * 1e-6) / 1e12, issue_ginstr_per_s: 4.0 * sms as f64 * clock_khz as f64 * 1e3 / 1e9 })
    }
}

/// Conversion warp instructions per key and per 8-row tile of the narrow
/// kernels at head dim 128 (their SASS; see the module docs).
fn narrow_conversion_per_key(format: KvFormat) -> f64 {
    match format {
        KvFormat::Bf16 | KvFormat::F16 => 0.0,
        KvFormat::Int8 | KvFormat::Fp8PerHead | KvFormat::Fp8 => 128.0 / 16.0,
        KvFormat::Int4G32 | KvFormat::Int4G64 | KvFormat::Int4G128 => 224.0 / 16.0,
        // (No narrow kernels: latent rows alone.)
        KvFormat::Fp8DsMla => 0.0,
    }
}

/// The row's bound (µs) and its largest term (`bytes`, `mma` or `convert`).
pub fn bound(m: &Machine, plan: &Plan) -> (f64, &'static str) {
    let s = plan.shape();
    let (format, d) = (s.kv_format, s.head_dim as f64);
    let bytes = plan.bytes_moved() as f64;
    let keys = plan.keys_read() as f64 * s.num_kv_heads as f64;
    let rows_per_kv_head = s.rows_per_kv_head().unwrap_or(0) as f64;
    let flops = plan.flops() as f64;
    let convert = match plan.family() {
        Family::Narrow => narrow_conversion_per_key(format) * (d / 128.0) * (rows_per_kv_head / 8.0).ceil() * keys,
        _ => 0.0,
    };
    let terms = [
        (bytes / (m.copy_gbps * 1e3), "bytes"),
        (if m.tensor_tflops > 0.0 { flops / (m.tensor_tflops * 1e6) } else { 0.0 }, "mma"),
        (if m.issue_ginstr_per_s > 0.0 { convert / (m.issue_ginstr_per_s * 1e3) } else { 0.0 }, "convert"),
    ];
    let (t, by) = terms.into_iter().fold((0.0, "bytes"), |best, t| if t.0 > best.0 { t } else { best });
    (m.empty_launch_us + t, by)
}
