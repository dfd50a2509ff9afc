//! Paged caches: the same problem as a contiguous NHD cache, scattered into
//! a pool of pages in a random order (with unused pages filled with NaN /
//! 0xFF bytes, so a wrong page id shows), read through a block table.

use decode_attn::cust::memory::DeviceBuffer;
use decode_attn::cust::stream::Stream;
use decode_attn::half::{bf16, f16};
use decode_attn::testing::Rng;
use decode_attn::{DecodeAttention, DecodeShape, Dtype, ElemType, KvCache, KvLayout, PageOrder, PlanOptions, StepInputs, TensorRef, Workspace};

use crate::common::{err, Problem};

/// How a case's cache is paged.
#[derive(Clone, Copy, Debug)]
pub struct Paging {
    pub page_size: u32,
    pub order: PageOrder,
    /// One pool whose pages hold K, V and their scales
    /// (`DecodeShape::packed_page`), instead of four pools.
    pub packed: bool,
}

#[allow(dead_code)] // the fuzzer builds its own
impl Paging {
    pub fn new(page_size: u32, order: PageOrder) -> Self {
        Paging { page_size, order, packed: false }
    }
    pub fn packed(page_size: u32, order: PageOrder) -> Self {
        Paging { page_size, order, packed: true }
    }
    /// The shape of a pool of `num_pages` pages for the NHD shape `contig`.
    pub fn shape(&self, contig: &DecodeShape, num_pages: u32) -> DecodeShape {
        let dense = DecodeShape { kv_layout: KvLayout::Paged { page_size: self.page_size, num_pages, order: self.order, page_bytes: None }, ..contig.clone() };
        if !self.packed {
            return dense;
        }
        let page_bytes = dense.packed_page().map(|p| p.page_bytes);
        DecodeShape { kv_layout: KvLayout::Paged { page_size: self.page_size, num_pages, order: self.order, page_bytes }, ..contig.clone() }
    }
    /// Short name for test names.
    pub fn name(&self) -> String {
        format!("paged-p{}-{:?}{}", self.page_size, self.order, if self.packed { "-packed" } else { "" })
    }
}

/// A pool holding a contiguous problem's rows, and its block table.
pub struct Pool {
    pub shape: DecodeShape,
    pub table: Vec<i32>,
    buffers: Buffers,
    /// A per-tensor format's K and V scales (one f32 each, not in pages).
    tensor_scales: Option<(DeviceBuffer<u8>, DeviceBuffer<u8>)>,
}

/// Four pools (K, V, and for quantized formats their scales), or one
/// packed pool holding all four (`DecodeShape::packed_page`).
enum Buffers {
    Separate { k: DeviceBuffer<u8>, v: DeviceBuffer<u8>, side: Option<(DeviceBuffer<u8>, DeviceBuffer<u8>)> },
    Packed(DeviceBuffer<u8>),
}

/// Copies `row` bytes per (b, t, h) from the contiguous NHD `src` into
/// `out` from byte `base` on, at the paged shape's strides (`side`: `src`
/// is scales `[batch, Hkv, padded_len]`, placed at the side strides).
#[allow(clippy::too_many_arguments)]
fn scatter(contig: &DecodeShape, paged: &DecodeShape, lens: &[u32], table: &[i32], src: &[u8], row: usize, side: bool, out: &mut [u8], base: usize) {
    let KvLayout::Paged { page_size, .. } = paged.kv_layout else { unreachable!() };
    let (ps, hkv, cap) = (page_size as usize, contig.num_kv_heads as usize, contig.max_seq_len as usize);
    let padded = cap.next_multiple_of(4);
    let width = paged.pages_per_seq() as usize;
    // Byte strides: values count elements of the format's bits, scales entries.
    let (s, unit) = if side { (paged.scale_strides(), row as u64 * 8) } else { (paged.kv_strides(), paged.kv_format.bits() as u64) };
    let bytes = |n: u64| (n * unit / 8) as usize;
    for (b, &len) in lens.iter().enumerate() {
        for t in 0..len as usize {
            let page = table[b * width + t / ps] as usize;
            for h in 0..hkv {
                let from = if side { ((b * hkv + h) * padded + t) * row } else { ((b * cap + t) * hkv + h) * row };
                let to = base + page * bytes(s.batch) + (t % ps) * bytes(s.token) + h * bytes(s.head);
                out[to..to + row].copy_from_slice(&src[from..from + row]);
            }
        }
    }
}

impl Pool {
    /// The pool of problem `p` (made with an NHD `contig` shape whose
    /// capacity is a multiple of the page size) with 3 spare pages.
    pub fn new(p: &Problem, paging: Paging, seed: u64) -> Result<Pool, String> {
        let contig = &p.shape;
        let ps = paging.page_size;
        let width = contig.max_seq_len.div_ceil(ps);
        let num_pages = contig.batch * width + 3;
        let mut ids: Vec<i32> = (0..num_pages as i32).collect();
        let mut rng = Rng::new(seed);
        for i in (1..ids.len()).rev() {
            ids.swap(i, rng.below(i as u64 + 1) as usize);
        }
        let table: Vec<i32> = ids[..(contig.batch * width) as usize].to_vec();
        let shape = paging.shape(contig, num_pages);
        let format = contig.kv_format;
        let row = format.row_bytes(contig.head_dim) as usize;
        let side = format.scale_bytes(contig.head_dim) as usize;
        let up = |bytes: Vec<u8>| DeviceBuffer::from_slice(&bytes).map_err(|e| e.to_string());
        let words = |w: &[u32]| w.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let bits = |x: &[f32]| -> Vec<u8> {
            match contig.dtype {
                Dtype::Bf16 => x.iter().flat_map(|&v| bf16::from_f32(v).to_bits().to_le_bytes()).collect(),
                Dtype::F16 => x.iter().flat_map(|&v| f16::from_f32(v).to_bits().to_le_bytes()).collect(),
            }
        };
        // (K rows, V rows, K side, V side) as bytes in the contiguous layout.
        let parts: [Option<Vec<u8>>; 4] = match &p.quant {
            Some(qb) => [Some(qb.host_k.0.clone()), Some(qb.host_v.0.clone()), Some(words(&qb.host_k.1)), Some(words(&qb.host_v.1))],
            None => [Some(bits(&p.k)), Some(bits(&p.v)), None, None],
        };
        let (kv_bytes, scale_bytes) = (shape.kv_bytes_required().ok_or("pool too large")? as usize, shape.scale_bytes_required().ok_or("pool too large")? as usize);
        let lens = &p.seq_lens;
        let tensor_scales = match (&p.quant, format.tensor_scaled()) {
            (Some(qb), true) => Some((up(words(&qb.host_k.1))?, up(words(&qb.host_v.1))?)),
            _ => None,
        };
        if paging.packed {
            let pp = shape.packed_page().ok_or("not paged")?;
            let mut pool = vec![0xFFu8; num_pages as usize * pp.page_bytes as usize];
            for (part, base) in parts.iter().zip([0, pp.v, pp.k_scales, pp.v_scales]) {
                if let Some(src) = part {
                    let (width, is_side) = if base >= pp.k_scales { (side, true) } else { (row, false) };
                    scatter(contig, &shape, lens, &table, src, width, is_side, &mut pool, base as usize);
                }
            }
            return Ok(Pool { shape, table, buffers: Buffers::Packed(up(pool)?), tensor_scales });
        }
        let one = |part: &Option<Vec<u8>>, width: usize, is_side: bool, n: usize| -> Result<Option<DeviceBuffer<u8>>, String> {
            let Some(src) = part else { return Ok(None) };
            let mut out = vec![0xFFu8; n];
            scatter(contig, &shape, lens, &table, src, width, is_side, &mut out, 0);
            up(out).map(Some)
        };
        let (k, v) = (one(&parts[0], row, false, kv_bytes)?.ok_or("no K")?, one(&parts[1], row, false, kv_bytes)?.ok_or("no V")?);
        let side = if format.tensor_scaled() { None } else { one(&parts[2], side, true, scale_bytes)?.zip(one(&parts[3], side, true, scale_bytes)?) };
        Ok(Pool { shape, table, buffers: Buffers::Separate { k, v, side }, tensor_scales })
    }

    /// The pool as `run_cache` takes it.
    pub fn cache(&self) -> KvCache<'_> {
        let format = self.shape.kv_format;
        let elem = decode_attn::check::kv_elem(format);
        // SAFETY: views of this pool's live buffers, typed as the format's.
        let view = |b: &DeviceBuffer<u8>, e: ElemType| unsafe { TensorRef::from_raw(b.as_device_ptr().as_raw(), b.len() / e.size_bytes(), e) };
        let cache = match &self.buffers {
            Buffers::Packed(pool) => KvCache::packed(&self.shape, pool).expect("a packed pool's shape"),
            Buffers::Separate { k, v, side } => {
                let mut cache = KvCache::plain(view(k, elem), view(v, elem));
                if let (Some((ks, vs)), Some(se)) = (side, decode_attn::check::scale_elem(format)) {
                    cache.k_scales = Some(view(ks, se));
                    cache.v_scales = Some(view(vs, se));
                }
                cache
            }
        };
        match &self.tensor_scales {
            Some((ks, vs)) => cache.with_fp8_scales(view(ks, ElemType::F32), view(vs, ElemType::F32)),
            None => cache,
        }
    }
}

/// Plans and runs problem `p` through its pool twice (NaN-poisoned O):
/// the outputs, which the caller checks against the reference.
#[allow(dead_code)] // the fuzzer plans its own runs
pub fn run(attn: &DecodeAttention, stream: &Stream, p: &mut Problem, pool: &Pool, opts: &PlanOptions) -> Result<(Vec<Vec<f32>>, u32), String> {
    let plan = attn.plan_paged(&pool.shape, &p.seq_lens, &pool.table, opts).map_err(|e| e.to_string())?;
    let mut ws = Workspace::for_plan(&plan).map_err(|e| e.to_string())?;
    let outs = p.run_twice(stream, |p| p.run_cache(attn, &plan, &pool.cache(), &mut ws, stream))?;
    Ok((outs, plan.max_splits()))
}

/// How a case plans.
#[allow(dead_code)] // the fuzzer plans its own runs
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// A plan of host lengths (and starts, block table), uploaded with it.
    Host,
    /// A capacity plan; lengths, block table and starts on the device.
    Capacity,
}

/// Plans `shape` for `mode` over `seq_lens` — a plan of host lengths
/// (paged where `table` is given, with key ranges where `starts` is) or a
/// capacity plan reading the same on the device — and runs `p` twice on
/// `cache`: the outputs and the plan's splits.
#[allow(clippy::too_many_arguments, dead_code)] // the fuzzer plans its own runs
pub fn run_planned(
    attn: &DecodeAttention,
    stream: &Stream,
    p: &mut Problem,
    mode: Mode,
    shape: &DecodeShape,
    seq_lens: &[u32],
    table: Option<&[i32]>,
    starts: Option<&[u32]>,
    opts: &PlanOptions,
    cache: &KvCache,
) -> Result<(Vec<Vec<f32>>, u32), String> {
    match mode {
        Mode::Host => {
            let plan = match (starts, table) {
                (Some(s), t) => attn.plan_key_ranges(shape, s, seq_lens, t, opts),
                (None, Some(t)) => attn.plan_paged(shape, seq_lens, t, opts),
                (None, None) => attn.plan(shape, seq_lens, opts),
            }
            .map_err(err)?;
            let mut ws = Workspace::for_plan(&plan).map_err(err)?;
            Ok((p.run_twice(stream, |p| p.run_cache(attn, &plan, cache, &mut ws, stream))?, plan.max_splits()))
        }
        Mode::Capacity => {
            let plan = attn.plan_capacity(shape, opts).map_err(err)?;
            let mut ws = Workspace::for_plan(&plan).map_err(err)?;
            let lens_dev = DeviceBuffer::from_slice(seq_lens).map_err(err)?;
            let table_dev = DeviceBuffer::from_slice(table.unwrap_or(&[0])).map_err(err)?;
            let starts_dev = DeviceBuffer::from_slice(starts.unwrap_or(&[0])).map_err(err)?;
            let step = if table.is_some() { StepInputs::paged(&lens_dev, &table_dev) } else { StepInputs::lengths(&lens_dev) };
            let step = if starts.is_some() { step.with_seq_starts(&starts_dev) } else { step };
            Ok((p.run_twice(stream, |p| p.run_step(attn, &plan, &step, cache, &mut ws, stream))?, plan.max_splits()))
        }
    }
}

