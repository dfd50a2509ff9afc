//! Test and benchmark utilities: deterministic random inputs (normal
//! values, heavy-tailed ones with outlier channels, large magnitudes,
//! constant rows or repeated keys; never all zeros), and the two utility
//! kernels the benchmark and the tests launch (a device-side random fill,
//! a busy-wait that keeps the GPU ahead of the host).

use cust::prelude::Stream;

use crate::attention::DecodeAttention;
use crate::module::Entry;
use crate::error::{ensure, Error, Result};
use crate::shape::DecodeShape;
use crate::tensor::{ElemType, TensorMut};

/// Fills a bf16/f16 buffer with deterministic pseudo-random values
/// (`decode_attn_abi::fill_value(seed, index)`, never all zero), on the
/// device: inputs too large to generate on the host.
pub fn fill_random<'a>(attn: &DecodeAttention, buf: impl Into<TensorMut<'a>>, seed: u64, stream: &Stream) -> Result<()> {
    let buf = buf.into();
    let name = match buf.elem {
        ElemType::Bf16 => decode_attn_abi::FILL_KERNEL_BF16,
        ElemType::F16 => decode_attn_abi::FILL_KERNEL_F16,
        other => return Err(Error::invalid("buf", "bf16 or f16 elements", other.name())),
    };
    ensure(buf.len % 2 == 0, "buf", "an even number of elements", buf.len)?;
    ensure(buf.addr % 4 == 0 && buf.addr != 0, "buf", "a non-null 4-byte aligned pointer", format!("{:#x}", buf.addr))?;
    let params = decode_attn_abi::FillParams { ptr: buf.addr, len: buf.len as u64, seed };
    let blocks = (attn.device_info().sm_count * 8).max(1);
    // SAFETY: writes `len` elements of the checked buffer.
    unsafe { attn.kernels().launch(Entry::Utility(name), (blocks, 1, 1), 256, 0, &params, stream.as_inner()) }
}

/// Enqueues a one-thread kernel that keeps the GPU busy for `duration`
/// (benchmarks put it ahead of timed launches so they run back to back on
/// the device, not at the pace the host enqueues them).
pub fn gpu_sleep(attn: &DecodeAttention, duration: std::time::Duration, stream: &Stream) -> Result<()> {
    let ns = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
    let params = decode_attn_abi::SleepParams { ns };
    // SAFETY: the kernel touches no memory.
    unsafe { attn.kernels().launch(Entry::Utility(decode_attn_abi::SLEEP_KERNEL), (1, 1, 1), 32, 0, &params, stream.as_inner()) }
}

/// Enqueues the tensor-core rate kernel: `blocks` blocks of `warpgroups`
/// warpgroups, each running `rounds` rounds of
/// [`decode_attn_abi::MMA_RATE_FLOPS_PER_ROUND`] bf16 `wgmma` FLOPs from
/// registers and shared memory; `out` receives one f32 per warpgroup
/// (the benchmark's GEMM rate: its FLOPs over its time).
pub fn mma_rate(attn: &DecodeAttention, blocks: u32, warpgroups: u32, rounds: u32, out: &cust::memory::DeviceBuffer<f32>, stream: &Stream) -> Result<()> {
    ensure((1..=8).contains(&warpgroups), "warpgroups", "1 to 8 a block", warpgroups)?;
    ensure(blocks >= 1, "blocks", "at least 1", blocks)?;
    let needed = blocks as u64 * warpgroups as u64;
    ensure(out.len() as u64 >= needed, "out", format!("at least {needed} f32 (one a warpgroup)"), out.len())?;
    let params = decode_attn_abi::MmaRateParams { out: out.as_device_ptr().as_raw(), rounds, _pad: 0 };
    // SAFETY: whole warpgroups, the shared memory the kernel asks for, one
    // f32 a warpgroup in `out` (checked).
    unsafe { attn.kernels().launch(Entry::Utility(decode_attn_abi::MMA_RATE_KERNEL), (blocks, 1, 1), 128 * warpgroups, decode_attn_abi::MMA_RATE_SMEM_BYTES, &params, stream.as_inner()) }
}

/// SplitMix64: small, fast, reproducible from a seed.
#[derive(Clone, Debug)]
pub struct Rng {
    state: u64,
    /// The second value of the last Box–Muller pair.
    spare: Option<f64>,
}

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng { state: seed ^ 0x9E37_79B9_7F4A_7C15, spare: None }
    }
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in (0, 1].
    pub fn uniform(&mut self) -> f64 {
        ((self.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }
    /// Standard normal (Box–Muller; each pair of uniforms gives two).
    pub fn normal(&mut self) -> f64 {
        if let Some(x) = self.spare.take() {
            return x;
        }
        let (u, v) = (self.uniform(), self.uniform());
        let r = (-2.0 * u.ln()).sqrt();
        let (sin, cos) = (std::f64::consts::TAU * v).sin_cos();
        self.spare = Some(r * sin);
        r * cos
    }
    /// Approximately standard normal, ~10× cheaper than [`Rng::normal`]:
    /// the centred sum of four 16-bit uniforms (Irwin–Hall), scaled to unit
    /// variance; its tails stop at ±3.46. For bulk test data.
    pub fn fast_normal(&mut self) -> f32 {
        let z = self.next_u64();
        let sum = (z & 0xFFFF) + ((z >> 16) & 0xFFFF) + ((z >> 32) & 0xFFFF) + (z >> 48);
        ((sum as f32 + 2.0) / 65536.0 - 2.0) * 1.732_050_8
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Distribution {
    /// N(0, 1).
    Normal,
    /// Student-t-like tails, and every 16th channel scaled ×8 (the outlier
    /// channels real K caches show).
    HeavyTailed,
    /// Q and K ×2 and V ×1000: with a softmax scale of 1 (the caller sets
    /// it), logits reach 100 and more.
    LargeMagnitude,
    /// Every K and V row is one value repeated (ties inside a dot product).
    /// V's values are drawn around 1, not 0: with zero-mean constant V rows
    /// each output row is one cancelling sum Σ p_t c_t, and any kernel that
    /// rounds P to 16 bits (this one, FlashAttention, FlashInfer) misses a
    /// 1e-2 relative bound on ~1 % of single-row cases (docs/history/validation-log.md).
    ConstantRows,
    /// K rows repeat with a short period (equal logits across keys).
    RepeatedKeys,
}

impl Distribution {
    pub const ALL: [Distribution; 5] =
        [Distribution::Normal, Distribution::HeavyTailed, Distribution::LargeMagnitude, Distribution::ConstantRows, Distribution::RepeatedKeys];
}

/// `n` values whose last dimension has `channels` entries.
pub fn random_values(rng: &mut Rng, n: usize, channels: usize, dist: Distribution) -> Vec<f32> {
    (0..n)
        .map(|i| match dist {
            Distribution::HeavyTailed => {
                let chi = (rng.normal().powi(2) + rng.normal().powi(2) + rng.normal().powi(2)) / 3.0;
                let t = rng.normal() / chi.sqrt().max(0.05);
                let outlier = if (i % channels) % 16 == 3 { 8.0 } else { 1.0 };
                (t * outlier).clamp(-1000.0, 1000.0) as f32
            }
            _ => rng.normal() as f32,
        })
        .collect()
}

pub fn to_bf16(x: &[f32]) -> Vec<half::bf16> {
    x.iter().map(|&v| half::bf16::from_f32(v)).collect()
}
pub fn to_f16(x: &[f32]) -> Vec<half::f16> {
    x.iter().map(|&v| half::f16::from_f32(v)).collect()
}
/// The values after a round trip through bf16 (what the GPU sees).
pub fn round_bf16(x: &[f32]) -> Vec<f32> {
    x.iter().map(|&v| half::bf16::from_f32(v).to_f32()).collect()
}
pub fn round_f16(x: &[f32]) -> Vec<f32> {
    x.iter().map(|&v| half::f16::from_f32(v).to_f32()).collect()
}

/// Host inputs of one problem as f32 (round them to the compute type before
/// use). Q is `[batch, q_len, Hq, D]`; K and V are laid out by
/// `shape.kv_strides()`, with the rows a sequence holds (`t < seq_lens[b]`)
/// drawn from `dist` and every other element NaN, so a kernel that reads
/// past a sequence's length cannot pass. Sequences are generated on up to
/// `threads` threads; the values depend only on `seed`.
pub fn problem_inputs(
    shape: &DecodeShape,
    seq_lens: &[u32],
    dist: Distribution,
    seed: u64,
    threads: usize,
) -> Result<(Vec<f32>, Vec<f32>, Vec<f32>)> {
    shape.validate()?;
    shape.validate_seq_lens(seq_lens)?;
    let d = shape.head_dim as usize;
    let q_scale = if dist == Distribution::LargeMagnitude { 2.0 } else { 1.0 };
    let mut rng = Rng::new(seed);
    let q: Vec<f32> = (0..shape.q_elems() as usize).map(|_| (rng.normal() * q_scale) as f32).collect();
    let n = shape.kv_elems_required().unwrap_or(0) as usize;
    let (mut k, mut v) = (nan_vec(n, threads), nan_vec(n, threads));
    let st = shape.kv_strides();
    let cap = shape.max_seq_len as u64;
    let seq_extent = (cap - 1) * st.token + (shape.num_kv_heads as u64 - 1) * st.head + d as u64;
    let fill = |b: usize, k: &mut [f32], v: &mut [f32], base: u64| {
        let mut rng = Rng::new(seed ^ (b as u64 + 1).wrapping_mul(0xD1B5_4A32_D192_ED03));
        let period = 1 + rng.below(4);
        for h in 0..shape.num_kv_heads as u64 {
            for t in 0..seq_lens[b] as u64 {
                let at = (t * st.token + h * st.head + base) as usize;
                let (krow, vrow) = (&mut k[at..at + d], &mut v[at..at + d]);
                fill_row(&mut rng, dist, krow, vrow);
                if dist == Distribution::RepeatedKeys && t >= period {
                    let src = ((t % period) * st.token + h * st.head + base) as usize;
                    k.copy_within(src..src + d, at);
                }
            }
        }
    };
    if st.batch >= seq_extent && st.batch > 0 {
        // Sequences own disjoint regions: generate them in parallel.
        let chunk = st.batch as usize;
        let mut jobs: Vec<(usize, &mut [f32], &mut [f32])> =
            k.chunks_mut(chunk).zip(v.chunks_mut(chunk)).enumerate().map(|(b, (k, v))| (b, k, v)).collect();
        let per_thread = jobs.len().div_ceil(threads.max(1));
        std::thread::scope(|s| {
            for group in jobs.chunks_mut(per_thread.max(1)) {
                s.spawn(|| {
                    for (b, k, v) in group.iter_mut() {
                        fill(*b, k, v, 0);
                    }
                });
            }
        });
    } else {
        for b in 0..shape.batch as usize {
            fill(b, &mut k, &mut v, b as u64 * st.batch);
        }
    }
    Ok((q, k, v))
}

fn fill_row(rng: &mut Rng, dist: Distribution, k: &mut [f32], v: &mut [f32]) {
    match dist {
        Distribution::Normal | Distribution::RepeatedKeys => {
            k.iter_mut().for_each(|x| *x = rng.fast_normal());
            v.iter_mut().for_each(|x| *x = rng.fast_normal());
        }
        Distribution::HeavyTailed => {
            // Student-t with 3 degrees of freedom; every 16th channel ×8.
            for (c, x) in k.iter_mut().enumerate() {
                let chi = (rng.fast_normal().powi(2) + rng.fast_normal().powi(2) + rng.fast_normal().powi(2)) / 3.0;
                let outlier = if c % 16 == 3 { 8.0 } else { 1.0 };
                *x = (rng.fast_normal() / chi.sqrt().max(0.05) * outlier).clamp(-1000.0, 1000.0);
            }
            v.iter_mut().for_each(|x| *x = rng.fast_normal());
        }
        Distribution::LargeMagnitude => {
            k.iter_mut().for_each(|x| *x = 2.0 * rng.fast_normal());
            v.iter_mut().for_each(|x| *x = 1000.0 * rng.fast_normal());
        }
        Distribution::ConstantRows => {
            k.fill(rng.fast_normal());
            v.fill(1.0 + 0.5 * rng.fast_normal());
        }
    }
}

/// `n` NaNs, written by up to `threads` threads (multi-MB buffers per case).
fn nan_vec(n: usize, threads: usize) -> Vec<f32> {
    let mut v: Vec<f32> = Vec::with_capacity(n);
    let chunk = n.div_ceil(threads.max(1)).max(1 << 16);
    std::thread::scope(|s| {
        for part in v.spare_capacity_mut().chunks_mut(chunk) {
            s.spawn(move || part.iter_mut().for_each(|x| {
                x.write(f32::NAN);
            }));
        }
    });
    // SAFETY: every element of the first `n` was written above.
    unsafe { v.set_len(n) };
    v
}
