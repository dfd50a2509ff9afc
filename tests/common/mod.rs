//! Shared by the GPU tests and the benchmark: random inputs for a shape,
//! uploaded to the device, run through the library, checked against the f64
//! reference.
#![allow(dead_code)]

use decode_attn::cust::memory::{CopyDestination, DeviceBuffer};
use decode_attn::cust::stream::Stream;
use decode_attn::half::{bf16, f16};
use decode_attn::reference;
use decode_attn::testing::{problem_inputs, Distribution};
use decode_attn::quant::{dequantize_cache, quantize_cache};
use decode_attn::{DecodeAttention, DecodeShape, Dtype, KvCache, KvFormat, Plan, Result, StepInputs, TensorRef, VariantBuffers, Workspace};

/// Device buffers of one problem, in either 16-bit type.
pub enum Buffers {
    Bf16 { q: DeviceBuffer<bf16>, k: DeviceBuffer<bf16>, v: DeviceBuffer<bf16>, o: DeviceBuffer<bf16> },
    F16 { q: DeviceBuffer<f16>, k: DeviceBuffer<f16>, v: DeviceBuffer<f16>, o: DeviceBuffer<f16> },
}

/// A quantized cache on the device (the attention kernels read these).
pub struct QuantBufs {
    pub k: DeviceBuffer<u8>,
    pub v: DeviceBuffer<u8>,
    /// Scales as 32-bit words (int8: f32 scales; int4: fp16 scale/zero pairs).
    pub k_scales: DeviceBuffer<u32>,
    pub v_scales: DeviceBuffer<u32>,
    /// What the CPU quantizer produced, for comparing the GPU quantizer.
    pub host_k: (Vec<u8>, Vec<u32>),
    pub host_v: (Vec<u8>, Vec<u32>),
}

impl QuantBufs {
    /// The cache as `run_cache` takes it (side buffers typed for the format).
    pub fn cache(&self, format: KvFormat) -> KvCache<'_> {
        let elem = decode_attn::check::scale_elem(format).expect("a quantized format");
        // SAFETY: views of this struct's live buffers.
        let side = |b: &DeviceBuffer<u32>| unsafe { TensorRef::from_raw(b.as_device_ptr().as_raw(), b.len() * 4 / elem.size_bytes(), elem) };
        KvCache::quantized(&self.k, &self.v, side(&self.k_scales), side(&self.v_scales))
    }
}

/// The run-time inputs of a shape's variant: sinks and ALiBi slopes (one
/// value per query head), key-range starts (one per sequence) and a draft
/// tree (masks and positions per new token), host copies and device arrays.
#[derive(Default)]
pub struct HeadBufs {
    pub sinks: Option<(Vec<f32>, DeviceBuffer<f32>)>,
    pub slopes: Option<(Vec<f32>, DeviceBuffer<f32>)>,
    pub starts: Option<(Vec<u32>, DeviceBuffer<u32>)>,
    pub tree: Option<TreeBufs>,
}

/// A draft tree per sequence: host masks and positions, and their device
/// copies (`KvCache::with_tree`).
pub struct TreeBufs {
    pub masks: Vec<u8>,
    pub positions: Vec<u32>,
    pub masks_dev: DeviceBuffer<u8>,
    pub positions_dev: DeviceBuffer<u32>,
}

impl TreeBufs {
    /// Uploads `masks` and `positions` (`[batch, q_len]` each).
    pub fn new(masks: Vec<u8>, positions: Vec<u32>) -> Result<TreeBufs> {
        let (masks_dev, positions_dev) = (DeviceBuffer::from_slice(&masks)?, DeviceBuffer::from_slice(&positions)?);
        Ok(TreeBufs { masks, positions, masks_dev, positions_dev })
    }
}

/// A random draft tree over each sequence's `q_len` new tokens, varied by
/// `seed`: token 0 hangs from the prefix, each later one from the prefix
/// (a forest) or from an earlier token. Masks name each token's ancestors
/// and itself; positions are the prefix length plus the depth.
pub fn random_tree(q_len: u32, seq_lens: &[u32], seed: u64) -> (Vec<u8>, Vec<u32>) {
    let mut rng = decode_attn::testing::Rng::new(seed ^ 0x7ee5);
    let (mut masks, mut positions) = (Vec::new(), Vec::new());
    for &len in seq_lens {
        let prefix = len - q_len;
        let (mut mask, mut depth) = (vec![0u8; q_len as usize], vec![0u32; q_len as usize]);
        for i in 0..q_len as usize {
            // A parent among the earlier tokens, or none (hangs from the prefix).
            let parent = (i > 0).then(|| rng.below(i as u64 + 1) as usize).and_then(|p| p.checked_sub(1));
            mask[i] = (1 << i) | parent.map_or(0, |p| mask[p]);
            depth[i] = parent.map_or(0, |p| depth[p] + 1);
        }
        masks.extend(mask);
        positions.extend(depth.iter().map(|d| prefix + d));
    }
    (masks, positions)
}

/// Sink logit of query head `h`: a spread from below the scores to far
/// above them (12: the sink takes most of the probability mass), varied by
/// `seed`.
pub fn sink_value(h: u32, seed: u64) -> f32 {
    [-3.0f32, 0.5, 4.0, 12.0][(h as u64 + seed) as usize % 4] + (h % 7) as f32 * 0.25
}

/// ALiBi slope of query head `h` of `heads`: the geometric sequence of
/// Press et al., `2^(−8 (h + 1) / heads)`.
pub fn alibi_slope(h: u32, heads: u32) -> f32 {
    2f32.powf(-8.0 * (h + 1) as f32 / heads as f32)
}

/// The sink logits and ALiBi slopes `shape` has (host values).
pub fn head_values(shape: &DecodeShape, seed: u64) -> (Option<Vec<f32>>, Option<Vec<f32>>) {
    let hq = shape.num_q_heads;
    (shape.variant.sinks.then(|| (0..hq).map(|h| sink_value(h, seed)).collect()), shape.variant.alibi.then(|| (0..hq).map(|h| alibi_slope(h, hq)).collect()))
}

impl HeadBufs {
    /// The arrays `shape` needs (none for a shape without sinks or ALiBi).
    pub fn for_shape(shape: &DecodeShape, seed: u64) -> Result<HeadBufs> {
        let upload = |v: Vec<f32>| -> Result<(Vec<f32>, DeviceBuffer<f32>)> {
            let d = DeviceBuffer::from_slice(&v)?;
            Ok((v, d))
        };
        let (sinks, slopes) = head_values(shape, seed);
        Ok(HeadBufs { sinks: sinks.map(upload).transpose()?, slopes: slopes.map(upload).transpose()?, starts: None, tree: None })
    }
    /// `cache` with these arrays.
    pub fn attach<'a>(&'a self, mut cache: KvCache<'a>) -> KvCache<'a> {
        if let Some((_, d)) = &self.sinks {
            cache = cache.with_sinks(d);
        }
        if let Some((_, d)) = &self.slopes {
            cache = cache.with_alibi_slopes(d);
        }
        if let Some(t) = &self.tree {
            cache = cache.with_tree(&t.masks_dev, &t.positions_dev);
        }
        cache
    }
    /// The host copies, for the reference.
    pub fn host(&self) -> reference::HeadInputs<'_> {
        reference::HeadInputs {
            sinks: self.sinks.as_ref().map(|(h, _)| &h[..]),
            alibi_slopes: self.slopes.as_ref().map(|(h, _)| &h[..]),
            seq_starts: self.starts.as_ref().map(|(h, _)| &h[..]),
            tree: self.tree.as_ref().map(|t| reference::TreeInputs { masks: &t.masks, positions: &t.positions }),
        }
    }
}

/// A problem's inputs: host copies (as the GPU sees them) and device buffers.
pub struct Problem {
    pub shape: DecodeShape,
    pub seq_lens: Vec<u32>,
    pub q: Vec<f32>,
    /// K and V values the kernels compute with (dequantized, for quantized formats).
    pub k: Vec<f32>,
    pub v: Vec<f32>,
    /// Q, O and the 16-bit K/V (for quantized formats: the unquantized cache).
    pub bufs: Buffers,
    pub quant: Option<QuantBufs>,
    /// The variant's per-head arrays (sinks, ALiBi slopes).
    pub heads: HeadBufs,
}

/// Bit pattern that is NaN in both bf16 and f16.
const NAN16: u16 = 0x7FFF;

/// The 16-bit types inputs are uploaded in.
pub trait Half16: decode_attn::Element + Copy + Default + Send {
    fn from_f32(x: f32) -> Self;
    fn to_f32(self) -> f32;
}
impl Half16 for bf16 {
    fn from_f32(x: f32) -> Self {
        bf16::from_f32(x)
    }
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
}
impl Half16 for f16 {
    fn from_f32(x: f32) -> Self {
        f16::from_f32(x)
    }
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
}

/// Element ranges `[start, end)` of a K/V buffer that hold every visible row
/// (`t < seq_lens[b]`), with the padding between those rows, merged.
pub fn visible_spans(shape: &DecodeShape, seq_lens: &[u32]) -> Vec<(usize, usize)> {
    let st = shape.kv_strides();
    let d = shape.head_dim as u64;
    let hkv = shape.num_kv_heads as u64;
    let mut spans = Vec::new();
    for (b, &len) in seq_lens.iter().enumerate() {
        let base = b as u64 * st.batch;
        let last_row = (len as u64 - 1) * st.token;
        if st.token >= st.head {
            // Token-major: one run per sequence.
            spans.push((base, base + last_row + (hkv - 1) * st.head + d));
        } else {
            for h in 0..hkv {
                let start = base + h * st.head;
                spans.push((start, start + last_row + d));
            }
        }
    }
    spans.sort_unstable();
    let mut merged: Vec<(usize, usize)> = Vec::new();
    for (s, e) in spans {
        let (s, e) = (s as usize, e as usize);
        match merged.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => merged.push((s, e)),
        }
    }
    merged
}

/// Rounds `host[span]` to `T` in place (on all threads).
fn round_in_place<T: Half16>(host: &mut [f32], spans: &[(usize, usize)]) {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    for &(s, e) in spans {
        let chunk = (e - s).div_ceil(threads).max(1 << 14);
        std::thread::scope(|sc| {
            for part in host[s..e].chunks_mut(chunk) {
                sc.spawn(move || part.iter_mut().for_each(|x| *x = T::from_f32(*x).to_f32()));
            }
        });
    }
}

/// Rounds `host[span]` to `T` in place and copies those spans into a new
/// device buffer of `host.len()` elements whose other elements are NaN.
fn upload<T: Half16>(host: &mut [f32], spans: &[(usize, usize)]) -> Result<DeviceBuffer<T>> {
    use decode_attn::cust::sys as cuda;
    let covered: usize = spans.iter().map(|(s, e)| e - s).sum();
    let whole = [(0, host.len())];
    // Mostly visible: one conversion and one copy beat many small ones.
    let spans = if covered * 2 >= host.len() { &whole[..] } else { spans };
    // SAFETY: every element is written below (NaN memset, then the spans).
    let buf = unsafe { DeviceBuffer::<T>::uninitialized(host.len().max(1))? };
    let base = buf.as_device_ptr().as_raw();
    let check = |status: cuda::CUresult| -> Result<()> {
        if status == cuda::CUresult::CUDA_SUCCESS {
            Ok(())
        } else {
            Err(decode_attn::Error::Driver { call: "upload", code: status as u32 })
        }
    };
    if spans.len() != 1 || spans[0] != (0, host.len()) {
        // SAFETY: a memset of the buffer's own elements.
        check(unsafe { cuda::cuMemsetD16_v2(base, NAN16, host.len()) })?;
    }
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut bits: Vec<T> = Vec::new();
    for &(s, e) in spans {
        bits.clear();
        bits.resize(e - s, T::default());
        // Software 16-bit conversion is slow: spread large spans over threads.
        let chunk = (e - s).div_ceil(threads).max(1 << 14);
        std::thread::scope(|sc| {
            for (src, dst) in host[s..e].chunks_mut(chunk).zip(bits.chunks_mut(chunk)) {
                sc.spawn(move || {
                    for (x, h) in src.iter_mut().zip(dst.iter_mut()) {
                        *h = T::from_f32(*x);
                        *x = h.to_f32();
                    }
                });
            }
        });
        // SAFETY: `s..e` lies inside the buffer; `bits` holds `e - s` values.
        check(unsafe { cuda::cuMemcpyHtoD_v2(base + (s * 2) as u64, bits.as_ptr() as *const std::ffi::c_void, (e - s) * 2) })?;
    }
    Ok(buf)
}

impl Problem {
    /// Random inputs from `dist` (rows past each sequence's length are NaN).
    pub fn new(shape: &DecodeShape, seq_lens: &[u32], dist: Distribution, seed: u64) -> Result<Problem> {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let (q, k, v) = problem_inputs(shape, seq_lens, dist, seed, threads)?;
        Problem::from_inputs(shape, seq_lens, q, k, v)
    }

    /// Rounds the f32 inputs to the shape's types (in place: the host copies
    /// are what the GPU sees) and uploads them; O starts as NaN. Of K and V
    /// only the spans holding visible rows are converted and copied; the
    /// rest of each device buffer is set to NaN on the device. Quantized
    /// formats also keep the unquantized 16-bit cache on the device.
    pub fn from_inputs(shape: &DecodeShape, seq_lens: &[u32], q: Vec<f32>, k: Vec<f32>, v: Vec<f32>) -> Result<Problem> {
        Self::build(shape, seq_lens, q, k, v, true)
    }

    /// As [`Problem::from_inputs`], without the unquantized 16-bit cache of
    /// a quantized format (what attention alone needs: half the uploads).
    pub fn for_attention(shape: &DecodeShape, seq_lens: &[u32], q: Vec<f32>, k: Vec<f32>, v: Vec<f32>) -> Result<Problem> {
        Self::build(shape, seq_lens, q, k, v, false)
    }

    fn build(shape: &DecodeShape, seq_lens: &[u32], mut q: Vec<f32>, mut k: Vec<f32>, mut v: Vec<f32>, keep_plain: bool) -> Result<Problem> {
        let n_o = shape.q_elems() as usize;
        let spans = visible_spans(shape, seq_lens);
        let whole = [(0, q.len())];
        let plain = keep_plain || !shape.kv_format.is_quantized();
        fn kv<T: Half16>(host: &mut [f32], spans: &[(usize, usize)], plain: bool) -> Result<DeviceBuffer<T>> {
            if plain {
                upload::<T>(host, spans)
            } else {
                round_in_place::<T>(host, spans);
                Ok(DeviceBuffer::from_slice(&[T::default()])?)
            }
        }
        let bufs = match shape.dtype {
            Dtype::Bf16 => Buffers::Bf16 {
                q: upload::<bf16>(&mut q, &whole)?,
                k: kv::<bf16>(&mut k, &spans, plain)?,
                v: kv::<bf16>(&mut v, &spans, plain)?,
                o: DeviceBuffer::from_slice(&vec![bf16::from_bits(NAN16); n_o])?,
            },
            Dtype::F16 => Buffers::F16 {
                q: upload::<f16>(&mut q, &whole)?,
                k: kv::<f16>(&mut k, &spans, plain)?,
                v: kv::<f16>(&mut v, &spans, plain)?,
                o: DeviceBuffer::from_slice(&vec![f16::from_bits(NAN16); n_o])?,
            },
        };
        let quant = if shape.kv_format.is_quantized() {
            let host_k = quantize_cache(shape, seq_lens, &k)?;
            let host_v = quantize_cache(shape, seq_lens, &v)?;
            k = dequantize_cache(shape, seq_lens, &host_k.0, &host_k.1)?;
            v = dequantize_cache(shape, seq_lens, &host_v.0, &host_v.1)?;
            Some(QuantBufs {
                k: DeviceBuffer::from_slice(&host_k.0)?,
                v: DeviceBuffer::from_slice(&host_v.0)?,
                k_scales: DeviceBuffer::from_slice(&host_k.1)?,
                v_scales: DeviceBuffer::from_slice(&host_v.1)?,
                host_k,
                host_v,
            })
        } else {
            None
        };
        let seed = seq_lens.iter().map(|&l| l as u64).sum();
        let mut heads = HeadBufs::for_shape(shape, seed)?;
        if shape.variant.tree {
            let (masks, positions) = random_tree(shape.q_len, seq_lens, seed);
            heads.tree = Some(TreeBufs::new(masks, positions)?);
        }
        Ok(Problem { shape: shape.clone(), seq_lens: seq_lens.to_vec(), q, k, v, bufs, quant, heads })
    }

    /// Fills O with NaN so an unwritten element cannot pass.
    pub fn poison_output(&mut self) -> Result<()> {
        let n = self.shape.q_elems() as usize;
        match &mut self.bufs {
            Buffers::Bf16 { o, .. } => o.copy_from(&vec![bf16::from_bits(NAN16); n])?,
            Buffers::F16 { o, .. } => o.copy_from(&vec![f16::from_bits(NAN16); n])?,
        }
        Ok(())
    }

    pub fn run(&mut self, attn: &DecodeAttention, plan: &Plan, ws: &mut Workspace, stream: &Stream) -> Result<()> {
        if let Some(qb) = &self.quant {
            let cache = self.heads.attach(qb.cache(self.shape.kv_format));
            return Self::run_on(&mut self.bufs, attn, plan, &cache, ws, stream);
        }
        let heads = &self.heads;
        match &mut self.bufs {
            Buffers::Bf16 { q, k, v, o } => attn.run(plan, &*q, &heads.attach(KvCache::plain(&*k, &*v)), &mut *o, ws, stream),
            Buffers::F16 { q, k, v, o } => attn.run(plan, &*q, &heads.attach(KvCache::plain(&*k, &*v)), &mut *o, ws, stream),
        }
    }

    /// Runs this problem's Q through another copy of its cache (a paged
    /// pool), with this problem's sinks and slopes.
    pub fn run_cache(&mut self, attn: &DecodeAttention, plan: &Plan, cache: &KvCache<'_>, ws: &mut Workspace, stream: &Stream) -> Result<()> {
        let cache = self.heads.attach(*cache);
        Self::run_on(&mut self.bufs, attn, plan, &cache, ws, stream)
    }

    fn run_on(bufs: &mut Buffers, attn: &DecodeAttention, plan: &Plan, cache: &KvCache<'_>, ws: &mut Workspace, stream: &Stream) -> Result<()> {
        match bufs {
            Buffers::Bf16 { q, o, .. } => attn.run(plan, &*q, cache, &mut *o, ws, stream),
            Buffers::F16 { q, o, .. } => attn.run(plan, &*q, cache, &mut *o, ws, stream),
        }
    }

    /// This problem's own cache as views that do not borrow it (so O can
    /// be borrowed mutably beside them).
    pub fn own_cache(&self) -> KvCache<'static> {
        if let Some(qb) = &self.quant {
            let c = qb.cache(self.shape.kv_format);
            // SAFETY: views of buffers that live as long as this problem,
            // which its callers keep alive across the runs using them.
            return unsafe {
                let v = |t: TensorRef| TensorRef::from_raw(t.addr(), t.len(), t.elem());
                KvCache { k: v(c.k), v: v(c.v), k_scales: c.k_scales.map(v), v_scales: c.v_scales.map(v), variant: VariantBuffers::NONE }
            };
        }
        let (k, v): (TensorRef, TensorRef) = match &self.bufs {
            Buffers::Bf16 { k, v, .. } => (k.into(), v.into()),
            Buffers::F16 { k, v, .. } => (k.into(), v.into()),
        };
        // SAFETY: as above.
        unsafe { KvCache::plain(TensorRef::from_raw(k.addr(), k.len(), k.elem()), TensorRef::from_raw(v.addr(), v.len(), v.elem())) }
    }

    /// One step of a capacity plan over `cache` (lengths and table on the
    /// device), with this problem's sinks and slopes.
    pub fn run_step(&mut self, attn: &DecodeAttention, plan: &Plan, step: &StepInputs<'_>, cache: &KvCache<'_>, ws: &mut Workspace, stream: &Stream) -> Result<()> {
        let cache = &self.heads.attach(*cache);
        match &mut self.bufs {
            Buffers::Bf16 { q, o, .. } => attn.run_step(plan, step, &*q, cache, &mut *o, ws, stream),
            Buffers::F16 { q, o, .. } => attn.run_step(plan, step, &*q, cache, &mut *o, ws, stream),
        }
    }

    /// Two launches, each on freshly NaN-poisoned O, and their outputs (a
    /// caller compares them bit for bit: a difference is a race).
    pub fn run_twice(&mut self, stream: &Stream, mut launch: impl FnMut(&mut Problem) -> Result<()>) -> std::result::Result<Vec<Vec<f32>>, String> {
        let mut outs = Vec::new();
        for _ in 0..2 {
            self.poison_output().map_err(|e| e.to_string())?;
            launch(self).map_err(|e| e.to_string())?;
            stream.synchronize().map_err(|e| format!("kernel failed: {e}"))?;
            outs.push(self.output().map_err(|e| e.to_string())?);
        }
        Ok(outs)
    }

    pub fn output(&self) -> Result<Vec<f32>> {
        let n = self.shape.q_elems() as usize;
        Ok(match &self.bufs {
            Buffers::Bf16 { o, .. } => {
                let mut h = vec![bf16::ZERO; n];
                o.copy_to(&mut h)?;
                h.iter().map(|x| x.to_f32()).collect()
            }
            Buffers::F16 { o, .. } => {
                let mut h = vec![f16::ZERO; n];
                o.copy_to(&mut h)?;
                h.iter().map(|x| x.to_f32()).collect()
            }
        })
    }

    /// Reference output for the listed sequences (all when `None`).
    pub fn reference(&self, batches: Option<&[usize]>) -> Result<Vec<f64>> {
        let all: Vec<usize> = (0..self.shape.batch as usize).collect();
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        reference::decode_attention_with(&self.shape, &self.seq_lens, &self.q, &self.k, &self.v, &self.heads.host(), batches.unwrap_or(&all), threads)
    }
}

pub mod cuda;

/// The split merge a case's name asks for: `global-merge` cases merge
/// through global memory, `cluster-merge` ones in thread-block clusters
/// (up to 8 chunks), the others as the planner picks.
pub fn merge_named(name: &str) -> decode_attn::MergeChoice {
    if name.contains("global-merge") {
        decode_attn::MergeChoice::Global
    } else if name.contains("cluster-merge") {
        decode_attn::MergeChoice::Cluster
    } else {
        decode_attn::MergeChoice::Auto
    }
}

/// The warp specialisation a case's name asks for: `wgmma-unspecialized`
/// the unspecialised wgmma kernel, else the planner's choice.
pub fn specialize_named(name: &str) -> decode_attn::SpecializeChoice {
    if name.contains("wgmma-unspecialized") {
        decode_attn::SpecializeChoice::Never
    } else {
        decode_attn::SpecializeChoice::Auto
    }
}

/// An error when a case named for a merge (`merge-kernel`, `global-merge`,
/// `cluster-merge`) was planned to merge another way.
pub fn check_merge_named(name: &str, plan: &Plan) -> std::result::Result<(), String> {
    use decode_attn::MergeMode::{Cluster, InAttention, Kernel};
    let named = [("merge-kernel", Kernel), ("global-merge", InAttention), ("cluster-merge", Cluster)];
    match named.into_iter().find(|(tag, _)| name.contains(tag)) {
        Some((tag, mode)) if plan.merge_mode() != mode => Err(format!("merge mode {:?}: the case is named for {tag}", plan.merge_mode())),
        _ => Ok(()),
    }
}
pub use cuda::init_cuda;

/// Whether a case needs kernels that only Hopper's module has (the wgmma
/// family, a cluster merge) on a GPU whose kernels are of another
/// architecture (a portable run: `DECODE_ATTN_DEVICE_ARCH`, or an Ampere
/// or Ada GPU).
pub fn needs_hopper(arch: &str, family: decode_attn_abi::Family, name: &str) -> bool {
    arch != "sm_90a" && (family == decode_attn_abi::Family::Wgmma || family == decode_attn_abi::Family::Mla || name.contains("cluster-merge"))
}

/// The outcome of such a case: it must fail with `Unsupported`, naming
/// the architecture it needs; `Ok` with that message.
pub fn must_be_unsupported<T>(outcome: std::result::Result<T, String>) -> std::result::Result<String, String> {
    match outcome {
        Ok(_) => Err("ran without sm_90a kernels: it must be Unsupported".into()),
        Err(e) if e.contains("unsupported") && e.contains("needs sm_90a") => Ok(e),
        Err(e) => Err(format!("must be Unsupported, naming sm_90a: {e}")),
    }
}

/// A test helper's error as the tests report it.
pub fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}
