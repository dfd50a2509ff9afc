//! CUDA-graph decode steps: one step (append the new K and V rows, then
//! attention) of a capacity plan is captured once and replayed for
//! `STEPS` steps while the device lengths grow by `q_len` between replays,
//! every step's output compared with the f64 reference. The cache starts
//! with sequences of very different lengths, and only their prefixes are
//! written before the loop: every later row must come from the captured
//! append (unwritten rows are NaN, so a missing one shows).

use decode_attn::cust::memory::{CopyDestination, DeviceBuffer};
use decode_attn::cust::stream::Stream;
use decode_attn::cust::sys as cuda;
use decode_attn::half::{bf16, f16};
use decode_attn::quant::{dequantize_fp8_row, dequantize_int4_row, dequantize_int8_row, fp8_tensor_scale, quantize_fp8_row, quantize_fp8_row_scaled, quantize_int4_row, quantize_int8_row};
use decode_attn::reference;
use decode_attn::testing::{random_values, round_bf16, round_f16, Distribution, Rng};
use decode_attn::{DecodeAttention, DecodeShape, VariantSpec, Dtype, ElemType, KvCache, KvFormat, KvLayout, KvMut, KvTensor, PlanOptions, SplitPolicy, StepInputs, TensorMut, TensorRef, Workspace};

use crate::common::cuda::{check, Graph};
use crate::common::err;
use crate::paged::Paging;

pub const STEPS: u32 = 100;

/// One replay test: a format, a layout and the lengths the sequences start at.
#[derive(Clone, Debug)]
pub struct GraphCase {
    pub name: String,
    pub format: KvFormat,
    pub dtype: Dtype,
    pub q_len: u32,
    pub paging: Option<Paging>,
    /// Lengths at step 0, that step's new tokens included.
    pub start_lens: Vec<u32>,
    pub split: SplitPolicy,
    /// Logits soft-cap of the shape (the soft-cap kernels).
    pub soft_cap: Option<f32>,
    /// The shape's window, sinks and ALiBi (the sinks' values change
    /// halfway through the replays: the graph reads the device array).
    pub window: Option<u32>,
    pub sinks: bool,
    pub alibi: bool,
    /// Key ranges: each sequence's first key, a device array every replay
    /// reads (a start past `L − q_len` reads as that until the sequence
    /// grows past it).
    pub starts: Option<Vec<u32>>,
}

const HQ: u32 = 8;
const HKV: u32 = 2;
const D: u32 = 128;


/// Element offset (in the cache's elements) of token t of sequence b, kv
/// head h: at the shape's strides, through the table when paged.
fn row_offset(shape: &DecodeShape, table: &[i32], b: usize, t: usize, h: usize) -> usize {
    let s = shape.kv_strides();
    let (unit, t) = match shape.kv_layout {
        KvLayout::Paged { page_size, .. } => {
            let ps = page_size as usize;
            (table[b * shape.pages_per_seq() as usize + t / ps] as usize, t % ps)
        }
        _ => (b, t),
    };
    unit * s.batch as usize + t * s.token as usize + h * s.head as usize
}

/// The values the kernels compute with for one 16-bit row (`scale`: a
/// per-tensor format's, the same when written and when read).
fn effective_row(format: KvFormat, row: &[f32], scale: f32) -> Vec<f32> {
    let d = row.len();
    let mut out = vec![0f32; d];
    match format {
        KvFormat::Bf16 | KvFormat::F16 => out.copy_from_slice(row),
        KvFormat::Int8 => {
            let mut q = vec![0i8; d];
            let s = quantize_int8_row(row, &mut q);
            dequantize_int8_row(&q, s, &mut out);
        }
        KvFormat::Fp8PerHead => {
            let mut q = vec![0u8; d];
            let s = quantize_fp8_row(row, &mut q);
            dequantize_fp8_row(&q, s, &mut out);
        }
        KvFormat::Fp8 => {
            let mut q = vec![0u8; d];
            quantize_fp8_row_scaled(row, scale, &mut q);
            dequantize_fp8_row(&q, scale, &mut out);
        }
        f => {
            let g = f.group().expect("int4") as usize;
            let (mut bytes, mut side) = (vec![0u8; d / 2], vec![0u32; d / g]);
            quantize_int4_row(row, g, &mut bytes, &mut side);
            dequantize_int4_row(&bytes, &side, g, &mut out);
        }
    }
    out
}

fn bits16(dtype: Dtype, x: f32) -> u16 {
    match dtype {
        Dtype::Bf16 => bf16::from_f32(x).to_bits(),
        Dtype::F16 => f16::from_f32(x).to_bits(),
    }
}

/// Device view of a byte buffer as elements of `elem`.
fn view(b: &DeviceBuffer<u8>, elem: ElemType) -> TensorRef<'_> {
    // SAFETY: a view of a live buffer of this test.
    unsafe { TensorRef::from_raw(b.as_device_ptr().as_raw(), b.len() / elem.size_bytes(), elem) }
}
fn view_mut(b: &mut DeviceBuffer<u8>, elem: ElemType) -> TensorMut<'_> {
    // SAFETY: as `view`, for a buffer the library writes.
    unsafe { TensorMut::from_raw(b.as_device_ptr().as_raw(), b.len() / elem.size_bytes(), elem) }
}

/// Runs one case: the worst relative L2 error over its steps, and the
/// capacity plan's chunks per sequence.
pub fn replay(attn: &DecodeAttention, stream: &Stream, case: &GraphCase, seed: u64) -> Result<(f64, u32), String> {
    let (batch, ql) = (case.start_lens.len() as u32, case.q_len);
    let longest = case.start_lens.iter().copied().max().unwrap_or(1) + STEPS * ql;
    let page = case.paging.map_or(1, |p| p.page_size);
    let cap = longest.next_multiple_of(page);
    let contig = DecodeShape { batch, num_q_heads: HQ, num_kv_heads: HKV, head_dim: D, q_len: ql, max_seq_len: cap, dtype: case.dtype, kv_format: case.format, kv_layout: KvLayout::Nhd, scale: None, variant: VariantSpec { soft_cap: case.soft_cap, window: case.window, sinks: case.sinks, alibi: case.alibi, key_ranges: case.starts.is_some(), tree: false } };
    let width = cap / page;
    let mut rng = Rng::new(seed);
    // A shuffled pool with two spare pages (contiguous caches: no table).
    let (shape, table) = match case.paging {
        Some(p) => {
            let num_pages = batch * width + 2;
            let mut ids: Vec<i32> = (0..num_pages as i32).collect();
            for i in (1..ids.len()).rev() {
                ids.swap(i, rng.below(i as u64 + 1) as usize);
            }
            (p.shape(&contig, num_pages), ids[..(batch * width) as usize].to_vec())
        }
        None => (contig.clone(), Vec::new()),
    };
    let row = D as usize;
    let rows_total = (batch * cap * HKV) as usize;
    let round = |x: Vec<f32>| if case.dtype == Dtype::Bf16 { round_bf16(&x) } else { round_f16(&x) };
    // Every row the loop will ever see, as the GPU receives it (16-bit),
    // and as the kernels compute with it (dequantized).
    let k16 = round(random_values(&mut rng, rows_total * row, row, Distribution::HeavyTailed));
    let v16 = round(random_values(&mut rng, rows_total * row, row, Distribution::Normal));
    // A per-tensor format's scales: the tensors' amax / 448 (doubled
    // halfway through the replays, `scales_dev`).
    let amax = |x: &[f32]| x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let mut scales = [fp8_tensor_scale(amax(&k16)), fp8_tensor_scale(amax(&v16))];
    let eff = |x: &[f32], scale: f32| -> Vec<f32> { x.chunks(row).flat_map(|r| effective_row(case.format, r, scale)).collect() };
    let (mut k_eff, mut v_eff) = (eff(&k16, scales[0]), eff(&v16, scales[1]));

    // The 16-bit prefix (tokens before step 0's new ones) in the cache's
    // layout (strides in the cache's elements); every other element NaN.
    let pool_elems = shape.kv_elems_required().ok_or("shape too large")? as usize;
    let prefix = |x: &[f32]| -> Vec<u16> {
        let mut out = vec![0xFFFFu16; pool_elems];
        for (b, &len) in case.start_lens.iter().enumerate() {
            for t in 0..(len - ql) as usize {
                for h in 0..HKV as usize {
                    let (from, to) = (((b * cap as usize + t) * HKV as usize + h) * row, row_offset(&shape, &table, b, t, h));
                    for i in 0..row {
                        out[to + i] = bits16(case.dtype, x[from + i]);
                    }
                }
            }
        }
        out
    };
    let bytes = |x: Vec<u16>| -> Vec<u8> { x.into_iter().flat_map(u16::to_le_bytes).collect() };
    let up = |x: &[u8]| DeviceBuffer::from_slice(x).map_err(err);
    let (k_prefix, v_prefix) = (bytes(prefix(&k16)), bytes(prefix(&v16)));
    let (k_plain, v_plain) = (up(&k_prefix)?, up(&v_prefix)?);
    let table_dev = DeviceBuffer::from_slice(if table.is_empty() { &[0i32][..] } else { &table }).map_err(err)?;
    let prefix_lens: Vec<u32> = case.start_lens.iter().map(|&l| l - ql).collect();
    let prefix_lens_dev = DeviceBuffer::from_slice(&prefix_lens).map_err(err)?;
    let mut lens_dev = DeviceBuffer::from_slice(&case.start_lens).map_err(err)?;
    let paged = shape.is_paged();
    let starts_dev = DeviceBuffer::from_slice(case.starts.as_deref().unwrap_or(&[0])).map_err(err)?;
    let starts = case.starts.is_some().then_some(&starts_dev);
    fn step_inputs<'a>(lens: &'a DeviceBuffer<u32>, table: &'a DeviceBuffer<i32>, paged: bool, starts: Option<&'a DeviceBuffer<u32>>) -> StepInputs<'a> {
        StepInputs { seq_lens: lens.into(), block_table: paged.then(|| table.into()), seq_starts: starts.map(|s| s.into()) }
    }

    // The cache: 16-bit formats start as the prefix itself; quantized ones
    // are quantized from it on the GPU (unwritten rows stay 0xFF). A packed
    // pool is one buffer, the four parts at their offsets in each page.
    let kv_bytes = shape.kv_bytes_required().ok_or("shape too large")? as usize;
    let scale_bytes = shape.scale_bytes_required().ok_or("shape too large")? as usize;
    let quantized = case.format.is_quantized();
    let packed = case.paging.is_some_and(|p| p.packed);
    let tensor_scaled = case.format.tensor_scaled();
    let mut scales_dev = [DeviceBuffer::from_slice(&scales[..1]).map_err(err)?, DeviceBuffer::from_slice(&scales[1..]).map_err(err)?];
    let scale_addr = [scales_dev[0].as_device_ptr().as_raw(), scales_dev[1].as_device_ptr().as_raw()];
    // SAFETY: views of `scales_dev`'s buffers, alive to the end of the
    // function (read by the kernels; not written).
    let scale_ref = |i: usize| unsafe { TensorRef::from_raw(scale_addr[i], 1, ElemType::F32) };
    let scale_mut = |i: usize| unsafe { TensorMut::from_raw(scale_addr[i], 1, ElemType::F32) };
    let (pool, part_bytes) = if packed {
        let (pp, (_, num_pages)) = shape.packed_page().zip(shape.page_geometry()).ok_or("not paged")?;
        let mut bytes = vec![0xFFu8; pp.page_bytes as usize * num_pages as usize];
        if !quantized {
            // Only the prefix's rows: the rest of each page is V's.
            for (prefix, base) in [(&k_prefix, 0usize), (&v_prefix, pp.v as usize)] {
                for (i, pair) in prefix.chunks(2).enumerate() {
                    if pair != [0xFF, 0xFF] {
                        bytes[base + 2 * i..base + 2 * i + 2].copy_from_slice(pair);
                    }
                }
            }
        }
        (vec![up(&bytes)?], [0; 4])
    } else if quantized {
        (vec![up(&vec![0xFF; kv_bytes])?, up(&vec![0xFF; kv_bytes])?, up(&vec![0xFF; scale_bytes])?, up(&vec![0xFF; scale_bytes])?], [kv_bytes, kv_bytes, scale_bytes, scale_bytes])
    } else {
        (vec![up(&k_prefix)?, up(&v_prefix)?], [kv_bytes, kv_bytes, 0, 0])
    };
    // Separate pools: (address, bytes) of K, V, K's scales, V's side
    // data (a packed pool's parts are the library's: `KvCache::packed`).
    let part = |i: usize| -> (u64, usize) { (pool[i.min(pool.len() - 1)].as_device_ptr().as_raw(), part_bytes[i]) };
    let kv_elem = decode_attn::check::kv_elem(case.format);
    let scale_elem = decode_attn::check::scale_elem(case.format);
    let plain_elem = decode_attn::check::dtype_elem(case.dtype);
    // SAFETY (both): views of `pool`'s live buffers, each within its buffer.
    let part_ref = |i: usize, e: ElemType| unsafe { TensorRef::from_raw(part(i).0, part(i).1 / e.size_bytes(), e) };
    let part_mut = |i: usize, e: ElemType| unsafe { TensorMut::from_raw(part(i).0, part(i).1 / e.size_bytes(), e) };
    // What append / quantize write for K (0) or V (1): in a packed pool,
    // the library's own views of the whole pool (`KvMut::packed`).
    let pool_bytes = pool[0].len();
    let target = |i: usize| -> decode_attn::Result<KvMut> {
        if packed {
            // SAFETY: the whole live pool buffer, written by this test's launches only.
            let whole = unsafe { TensorMut::from_raw(pool[0].as_device_ptr().as_raw(), pool_bytes, ElemType::U8) };
            let t = KvMut::packed(&shape, whole, if i == 0 { KvTensor::K } else { KvTensor::V })?;
            return Ok(if tensor_scaled { t.with_fp8_scale(scale_mut(i)) } else { t });
        }
        let side = if tensor_scaled { Some(scale_mut(i)) } else { scale_elem.map(|se| part_mut(i + 2, se)) };
        Ok(KvMut { data: part_mut(i, kv_elem), scales: side })
    };
    if scale_elem.is_some() {
        let pre = step_inputs(&prefix_lens_dev, &table_dev, paged, None);
        attn.quantize_kv(&shape, &pre, view(&k_plain, plain_elem), target(0).map_err(err)?, stream).map_err(err)?;
        attn.quantize_kv(&shape, &pre, view(&v_plain, plain_elem), target(1).map_err(err)?, stream).map_err(err)?;
    }

    // Per-step inputs, all uploaded up front: Q and the new K/V rows.
    let q_elems = (batch * ql * HQ * D) as usize;
    let new_elems = (batch * ql * HKV * D) as usize;
    let mut q_all = Vec::with_capacity(STEPS as usize * q_elems);
    let (mut knew_all, mut vnew_all) = (Vec::new(), Vec::new());
    for s in 0..STEPS {
        q_all.extend(round(random_values(&mut rng, q_elems, row, Distribution::Normal)));
        for (b, &l0) in case.start_lens.iter().enumerate() {
            let len = (l0 + s * ql) as usize;
            for t in len - ql as usize..len {
                let at = (b * cap as usize + t) * HKV as usize * row;
                knew_all.extend_from_slice(&k16[at..at + HKV as usize * row]);
                vnew_all.extend_from_slice(&v16[at..at + HKV as usize * row]);
            }
        }
    }
    let to16 = |x: &[f32]| bytes(x.iter().map(|&v| bits16(case.dtype, v)).collect());
    let (q_all_dev, knew_all_dev, vnew_all_dev) = (up(&to16(&q_all))?, up(&to16(&knew_all))?, up(&to16(&vnew_all))?);
    let (q_dev, knew_dev, vnew_dev) = (up(&vec![0u8; q_elems * 2])?, up(&vec![0u8; new_elems * 2])?, up(&vec![0u8; new_elems * 2])?);
    let mut o_dev = up(&vec![0u8; q_elems * 2])?;

    // The variant's per-head arrays (sinks, slopes), read by every replay.
    let (mut sinks_host, slopes_host) = crate::common::head_values(&contig, seed);
    let mut sinks_dev = DeviceBuffer::from_slice(sinks_host.as_deref().unwrap_or(&[0.0])).map_err(err)?;
    let slopes_dev = DeviceBuffer::from_slice(slopes_host.as_deref().unwrap_or(&[0.0])).map_err(err)?;

    let merge = crate::common::merge_named(&case.name);
    let plan = attn.plan_capacity(&shape, &PlanOptions { split: case.split, merge, ..Default::default() }).map_err(err)?;
    crate::common::check_merge_named(&case.name, &plan)?;
    let mut ws = Workspace::for_plan(&plan).map_err(err)?;
    let raw = stream.as_inner();
    stream.synchronize().map_err(err)?;

    // Capture one step: append K, append V, attention.
    let graph = Graph::capture(stream, || -> decode_attn::Result<()> {
        let step = step_inputs(&lens_dev, &table_dev, paged, starts);
        attn.append_kv(&shape, &step, view(&knew_dev, plain_elem), target(0)?, stream)?;
        attn.append_kv(&shape, &step, view(&vnew_dev, plain_elem), target(1)?, stream)?;
        let cache = match scale_elem {
            _ if packed && tensor_scaled => KvCache::packed(&shape, &pool[0])?.with_fp8_scales(scale_ref(0), scale_ref(1)),
            _ if packed => KvCache::packed(&shape, &pool[0])?,
            _ if tensor_scaled => KvCache::fp8(part_ref(0, kv_elem), part_ref(1, kv_elem), scale_ref(0), scale_ref(1)),
            Some(se) => KvCache::quantized(part_ref(0, kv_elem), part_ref(1, kv_elem), part_ref(2, se), part_ref(3, se)),
            None => KvCache::plain(part_ref(0, kv_elem), part_ref(1, kv_elem)),
        };
        let cache = if case.sinks { cache.with_sinks(&sinks_dev) } else { cache };
        let cache = if case.alibi { cache.with_alibi_slopes(&slopes_dev) } else { cache };
        attn.run_step(&plan, &step, view(&q_dev, plain_elem), &cache, view_mut(&mut o_dev, plain_elem), &mut ws, stream)
    })?;

    let mut worst = 0f64;
    let mut result = Ok(());
    let mut out16 = vec![0u8; q_elems * 2];
    for s in 0..STEPS as usize {
        let lens: Vec<u32> = case.start_lens.iter().map(|&l| l + s as u32 * ql).collect();
        if s == STEPS as usize / 2 {
            if let Some(sinks) = sinks_host.as_mut() {
                // New sink values under the same graph.
                sinks.iter_mut().for_each(|x| *x = 6.0 - *x);
                sinks_dev.copy_from(&sinks[..]).map_err(err)?;
            }
            if tensor_scaled {
                // New scales under the same graph: the cached rows now read
                // as twice their values (exactly), and this step's rows on
                // are quantized with the new scales.
                for (i, (x16, x_eff)) in [(&k16, &mut k_eff), (&v16, &mut v_eff)].into_iter().enumerate() {
                    scales[i] *= 2.0;
                    scales_dev[i].copy_from(&scales[i..i + 1]).map_err(err)?;
                    for (b, &len) in lens.iter().enumerate() {
                        for t in 0..cap as usize {
                            let at = (b * cap as usize + t) * HKV as usize * row;
                            let rows = at..at + HKV as usize * row;
                            if t < (len - ql) as usize {
                                x_eff[rows].iter_mut().for_each(|v| *v *= 2.0);
                            } else {
                                let fresh = eff(&x16[rows.clone()], scales[i]);
                                x_eff[rows].copy_from_slice(&fresh);
                            }
                        }
                    }
                }
            }
        }
        // SAFETY: device-to-device copies of this step's inputs into the
        // buffers the graph reads, and NaN poison in O, all on the stream.
        unsafe {
            let copy = |dst: &DeviceBuffer<u8>, src: &DeviceBuffer<u8>, n: usize| {
                cuda::cuMemcpyDtoDAsync_v2(dst.as_device_ptr().as_raw(), src.as_device_ptr().as_raw() + (s * n) as u64, n, raw)
            };
            check("copy q", copy(&q_dev, &q_all_dev, q_elems * 2))?;
            check("copy k", copy(&knew_dev, &knew_all_dev, new_elems * 2))?;
            check("copy v", copy(&vnew_dev, &vnew_all_dev, new_elems * 2))?;
            check("poison o", cuda::cuMemsetD8Async(o_dev.as_device_ptr().as_raw(), 0xFF, q_elems * 2, raw))?;
        }
        graph.launch(stream)?;
        stream.synchronize().map_err(err)?;
        o_dev.copy_to(&mut out16[..]).map_err(err)?;
        let out: Vec<f32> = out16
            .chunks(2)
            .map(|c| {
                let b = u16::from_le_bytes([c[0], c[1]]);
                if case.dtype == Dtype::Bf16 { bf16::from_bits(b).to_f32() } else { f16::from_bits(b).to_f32() }
            })
            .collect();
        let q = &q_all[s * q_elems..(s + 1) * q_elems];
        let heads = reference::HeadInputs { sinks: sinks_host.as_deref(), alibi_slopes: slopes_host.as_deref(), seq_starts: case.starts.as_deref(), tree: None };
        let all: Vec<usize> = (0..batch as usize).collect();
        let reference = reference::decode_attention_with(&contig, &lens, q, &k_eff, &v_eff, &heads, &all, 1).map_err(err)?;
        let cmp = reference::relative_l2_error(&out, &reference).map_err(err)?;
        if cmp.nonfinite || cmp.rel_l2 > crate::TOLERANCE {
            result = Err(format!("step {s} (lengths {lens:?}): rel_l2={:.2e} nonfinite={}", cmp.rel_l2, cmp.nonfinite));
            break;
        }
        worst = worst.max(cmp.rel_l2);
        attn.advance_seq_lens(&shape, &mut lens_dev, ql, stream).map_err(err)?;
    }
    let chunks = match plan.mode() {
        decode_attn::PlanMode::Capacity { chunks_per_seq } => chunks_per_seq,
        decode_attn::PlanMode::Lengths => 1,
    };
    result.map(|()| (worst, chunks))
}

/// The replay cases: every format, contiguous and paged (page sizes 16
/// and 1, both orders), sequences starting at lengths from q_len to 1500.
pub fn cases() -> Vec<GraphCase> {
    use decode_attn::PageOrder::{HeadMajor, TokenMajor};
    let mut out = Vec::new();
    for format in KvFormat::ALL.into_iter().filter(|f| !f.latent_only()) {
        // Quantized formats alternate the query type.
        let dtype = format.required_dtype().unwrap_or(if matches!(format, KvFormat::Int4G32 | KvFormat::Int4G128) { Dtype::F16 } else { Dtype::Bf16 });
        let layouts: [(Option<Paging>, u32, &str); 4] = [
            (None, 1, "contiguous"),
            (Some(Paging::new(16, TokenMajor)), 3, "paged16-token-major"),
            (Some(Paging::new(1, HeadMajor)), 2, "paged1-head-major"),
            (Some(Paging::packed(16, HeadMajor)), 2, "paged16-head-major-packed"),
        ];
        for (paging, q_len, layout) in layouts {
            out.push(GraphCase {
                name: format!("graph-replay/{}/{layout}/q{q_len}/{STEPS}-steps", format.name()),
                format,
                dtype,
                q_len,
                paging,
                start_lens: vec![q_len, 37, 700, 1500],
                split: SplitPolicy::Auto,
                soft_cap: None,
                window: None,
                sinks: false,
                alibi: false,
                starts: None,
            });
        }
        // Unsplit (one chunk per sequence, written directly), paged.
        out.push(GraphCase {
            name: format!("graph-replay/{}/paged16-unsplit/q1/{STEPS}-steps", format.name()),
            format,
            dtype,
            q_len: 1,
            paging: Some(Paging::new(16, TokenMajor)),
            start_lens: vec![1, 5, 300, 17],
            split: SplitPolicy::Never,
            soft_cap: None,
            window: None,
            sinks: false,
            alibi: false,
            starts: None,
        });
        // The same split as the Auto rows, merged through global memory
        // (the Auto rows merge in thread-block clusters where they can).
        out.push(GraphCase {
            name: format!("graph-replay/{}/contiguous-global-merge/q1/{STEPS}-steps", format.name()),
            format,
            dtype,
            q_len: 1,
            paging: None,
            start_lens: vec![1, 37, 700, 1500],
            split: SplitPolicy::Auto,
            soft_cap: None,
            window: None,
            sinks: false,
            alibi: false,
            starts: None,
        });
        // Chunks of 256 keys: 7 per sequence at capacity, one cluster of 7
        // blocks each, of which 1 to 7 are live as the lengths grow (the
        // chunks past a length exit at once); contiguous and paged.
        for (paging, layout) in [(None, "contiguous"), (Some(Paging::new(16, TokenMajor)), "paged16-token-major")] {
            out.push(GraphCase {
                name: format!("graph-replay/{}/{layout}-cluster-merge/q2/{STEPS}-steps", format.name()),
                format,
                dtype,
                q_len: 2,
                paging,
                start_lens: vec![2, 37, 300, 1500],
                split: SplitPolicy::ChunkKeys(256),
                soft_cap: None,
                window: None,
                sinks: false,
                alibi: false,
                starts: None,
            });
        }
        // One-stage chunks of 32 rows: 18 to 36 slots (≥ 295 KB a block),
        // so the capacity plan merges with the merge kernel.
        out.push(GraphCase {
            name: format!("graph-replay/{}/contiguous-merge-kernel/q8/{STEPS}-steps", format.name()),
            format,
            dtype,
            q_len: 8,
            paging: None,
            start_lens: vec![8, 37, 700, 1500],
            split: SplitPolicy::ChunkKeys(64),
            soft_cap: None,
            window: None,
            sinks: false,
            alibi: false,
            starts: None,
        });
    }
    // Soft-cap kernels in a captured step: a 16-bit cache split and merged
    // in the attention kernel, and an int8 pool (capped logits of 2 over
    // N(0, 1) scores: most of them bent by the tanh).
    for (format, paging, layout) in [(KvFormat::Bf16, None, "contiguous"), (KvFormat::Int8, Some(Paging::new(16, TokenMajor)), "paged16-token-major")] {
        out.push(GraphCase {
            name: format!("graph-replay/{}/softcap/{layout}/q2/{STEPS}-steps", format.name()),
            format,
            dtype: Dtype::Bf16,
            q_len: 2,
            paging,
            start_lens: vec![2, 37, 700, 1500],
            split: SplitPolicy::Auto,
            soft_cap: Some(2.0),
            window: None,
            sinks: false,
            alibi: false,
            starts: None,
        });
    }
    // The variants in a captured step: gpt-oss's window of 128 with sinks
    // (bf16, split as the planner picks), Gemma 2's soft-cap under a
    // window (an int8 pool), ALiBi with sinks over 16-token pages (int4),
    // and a window merged by the merge kernel (bf16, q_len 8). The
    // sequences grow past their windows during the replays.
    let variants: [(KvFormat, Option<Paging>, u32, SplitPolicy, Option<f32>, Option<u32>, bool, bool, &str); 4] = [
        (KvFormat::Bf16, None, 1, SplitPolicy::Auto, None, Some(128), true, false, "window128-sinks/contiguous"),
        (KvFormat::Int8, Some(Paging::new(16, TokenMajor)), 2, SplitPolicy::Auto, Some(30.0), Some(300), false, false, "softcap30-window300/paged16-token-major"),
        (KvFormat::Int4G32, Some(Paging::packed(16, TokenMajor)), 2, SplitPolicy::ChunkKeys(256), None, None, true, true, "alibi-sinks/paged16-packed"),
        (KvFormat::Bf16, None, 8, SplitPolicy::ChunkKeys(64), None, Some(1000), false, false, "window1000/contiguous-merge-kernel"),
    ];
    for (format, paging, q_len, split, soft_cap, window, sinks, alibi, tag) in variants {
        out.push(GraphCase {
            name: format!("graph-replay/{}/{tag}/q{q_len}/{STEPS}-steps", format.name()),
            format,
            dtype: Dtype::Bf16,
            q_len,
            paging,
            start_lens: vec![q_len, 37, 700, 1500],
            split,
            soft_cap,
            window,
            sinks,
            alibi,
            starts: None,
        });
    }
    // Key ranges (left-padded sequences; a serving engine's evicted
    // prefixes) in a captured step, the starts a device array: a 16-bit
    // pool of 16-token pages split as the planner picks, fp8 per head with
    // a window and sinks, and int8 merged by the merge kernel. The first
    // sequence's start lies past its first lengths (read as L − q_len
    // until it grows past it).
    let ranges: [(KvFormat, Option<Paging>, u32, SplitPolicy, Option<u32>, bool, &str); 3] = [
        (KvFormat::Bf16, Some(Paging::new(16, TokenMajor)), 1, SplitPolicy::Auto, None, false, "ranges/paged16-token-major"),
        (KvFormat::Fp8PerHead, None, 2, SplitPolicy::Auto, Some(200), true, "ranges-window200-sinks/contiguous"),
        (KvFormat::Int8, None, 8, SplitPolicy::ChunkKeys(64), None, false, "ranges/contiguous-merge-kernel"),
    ];
    for (format, paging, q_len, split, window, sinks, tag) in ranges {
        out.push(GraphCase {
            name: format!("graph-replay/{}/{tag}/q{q_len}/{STEPS}-steps", format.name()),
            format,
            dtype: Dtype::Bf16,
            q_len,
            paging,
            start_lens: vec![q_len, 37, 700, 1500],
            split,
            soft_cap: None,
            window,
            sinks,
            alibi: false,
            starts: Some(vec![q_len + 40, 9, 17, 1400]),
        });
    }
    out
}
