//! Paged caches: the same problem as a contiguous NHD cache, scattered into
//! a pool of pages in a random order (with unused pages filled with NaN /
//! 0xFF bytes, so a wrong page id shows), read through a block table.

use decode_attn::cust::memory::DeviceBuffer;
use decode_attn::cust::stream::Stream;
use decode_attn::half::{bf16, f16};
use decode_attn::testing::Rng;
use decode_attn::{DecodeAttention, DecodeShape, Dtype, ElemType, KvCache, KvLayout, PageOrder, PlanOptions, TensorRef, Workspace};

use crate::common::Problem;

/// How a case's cache is paged.
#[derive(Clone, Copy, Debug)]
pub struct Paging {
    pub page_size: u32,
    pub order: PageOrder,
}

/// A pool holding a contiguous problem's rows, and its block table.
pub struct Pool {
    pub shape: DecodeShape,
    pub table: Vec<i32>,
    pub k: DeviceBuffer<u8>,
    pub v: DeviceBuffer<u8>,
    pub k_side: Option<DeviceBuffer<u8>>,
    pub v_side: Option<DeviceBuffer<u8>>,
}

/// Copies `row` bytes per (b, t, h) from the contiguous NHD `src` to the
/// pool; `side_entry` > 0: `src` is side data `[batch, Hkv, padded_len]`.
fn scatter(contig: &DecodeShape, paged: &DecodeShape, lens: &[u32], table: &[i32], src: &[u8], row: usize, side: bool) -> Vec<u8> {
    let KvLayout::Paged { page_size, num_pages, order } = paged.kv_layout else { unreachable!() };
    let (ps, hkv, cap) = (page_size as usize, contig.num_kv_heads as usize, contig.max_seq_len as usize);
    let padded = cap.next_multiple_of(4);
    let width = paged.pages_per_seq() as usize;
    let mut out = vec![0xFFu8; num_pages as usize * ps * hkv * row];
    for (b, &len) in lens.iter().enumerate() {
        for t in 0..len as usize {
            let page = table[b * width + t / ps] as usize;
            for h in 0..hkv {
                let from = if side { ((b * hkv + h) * padded + t) * row } else { ((b * cap + t) * hkv + h) * row };
                let to = if side || order == PageOrder::HeadMajor { ((page * hkv + h) * ps + t % ps) * row } else { ((page * ps + t % ps) * hkv + h) * row };
                out[to..to + row].copy_from_slice(&src[from..from + row]);
            }
        }
    }
    out
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
        let shape = DecodeShape { kv_layout: KvLayout::Paged { page_size: ps, num_pages, order: paging.order }, ..contig.clone() };
        let format = contig.kv_format;
        let row = format.row_bytes(contig.head_dim) as usize;
        let up = |bytes: Vec<u8>| DeviceBuffer::from_slice(&bytes).map_err(|e| e.to_string());
        let (k, v, k_side, v_side) = match &p.quant {
            Some(qb) => {
                let side = format.side_bytes(contig.head_dim) as usize;
                let words = |w: &[u32]| w.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
                (
                    up(scatter(contig, &shape, &p.seq_lens, &table, &qb.host_k.0, row, false))?,
                    up(scatter(contig, &shape, &p.seq_lens, &table, &qb.host_v.0, row, false))?,
                    Some(up(scatter(contig, &shape, &p.seq_lens, &table, &words(&qb.host_k.1), side, true))?),
                    Some(up(scatter(contig, &shape, &p.seq_lens, &table, &words(&qb.host_v.1), side, true))?),
                )
            }
            None => {
                let bits = |x: &[f32]| -> Vec<u8> {
                    match contig.dtype {
                        Dtype::Bf16 => x.iter().flat_map(|&v| bf16::from_f32(v).to_bits().to_le_bytes()).collect(),
                        Dtype::F16 => x.iter().flat_map(|&v| f16::from_f32(v).to_bits().to_le_bytes()).collect(),
                    }
                };
                (
                    up(scatter(contig, &shape, &p.seq_lens, &table, &bits(&p.k), row, false))?,
                    up(scatter(contig, &shape, &p.seq_lens, &table, &bits(&p.v), row, false))?,
                    None,
                    None,
                )
            }
        };
        Ok(Pool { shape, table, k, v, k_side, v_side })
    }

    /// The pool as `run_cache` takes it.
    pub fn cache(&self) -> KvCache<'_> {
        let format = self.shape.kv_format;
        let elem = decode_attn::check::kv_elem(format);
        let n = |b: &DeviceBuffer<u8>, e: ElemType| b.len() / e.size_bytes();
        // SAFETY: views of this pool's live buffers, typed as the format's.
        let view = |b: &DeviceBuffer<u8>, e: ElemType| unsafe { TensorRef::from_raw(b.as_device_ptr().as_raw(), n(b, e), e) };
        let mut cache = KvCache::plain(view(&self.k, elem), view(&self.v, elem));
        if let (Some(ks), Some(vs)) = (&self.k_side, &self.v_side) {
            let se = decode_attn::check::side_elem(format).expect("quantized");
            cache.k_scales = Some(view(ks, se));
            cache.v_scales = Some(view(vs, se));
        }
        cache
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
