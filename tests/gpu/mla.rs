//! MLA (the latent family): a bf16 latent cache of 576-value rows, V the
//! first 512 of each, against the f64 reference (`reference::latent_attention`)
//! on random inputs — rows past each sequence's length NaN, O poisoned with
//! NaN, every case run twice and compared bit for bit. Contiguous, padded
//! and paged caches (pages in a random order, unused pages NaN), plans of
//! host lengths and capacity plans of device lengths, split and not.

use decode_attn::cust::memory::{CopyDestination, DeviceBuffer};
use decode_attn::cust::stream::Stream;
use decode_attn::half::bf16;
use decode_attn::reference::{latent_attention, LatentShape};
use decode_attn::testing::{random_values, Distribution, Rng};
use decode_attn::{DecodeAttention, DecodeShape, KvCache, KvLayout, PageOrder, PlanOptions, SplitPolicy, StepInputs, Workspace};
use decode_attn_abi::MLA_DIMS;

use crate::common::err;

/// How a case's latent cache is laid out.
#[derive(Clone, Copy, Debug)]
pub enum Layout {
    /// `[batch, max_seq_len, 1, 576]`.
    Contiguous,
    /// Rows 640 values apart, sequences 8 rows more than the capacity.
    Padded,
    /// Pages of this many tokens, in a random order of a pool with spare
    /// (NaN) pages.
    Paged(u32),
}

/// One MLA case.
#[derive(Clone, Debug)]
pub struct Case {
    pub name: String,
    pub heads: u32,
    pub q_len: u32,
    pub seq_lens: Vec<u32>,
    pub cap: u32,
    pub split: SplitPolicy,
    pub layout: Layout,
    /// A capacity plan run with device lengths (else a plan of host lengths).
    pub capacity: bool,
    pub dist: Distribution,
    /// DeepSeek's `1/√192` rather than the default `1/√576`.
    pub deepseek_scale: bool,
}

/// The cases: head counts of tensor-parallel shards (8, 16) to a whole
/// DeepSeek layer (128) and an odd one; q_len 1 (decode), 2 (multi-token
/// prediction), 3 and 8 (speculative steps); lengths below, at and past a
/// stage (64) and a chunk, ragged; every layout; split and not.
#[allow(dead_code)] // the fuzzer makes its own (`fuzz --mla`)
pub fn cases() -> Vec<Case> {
    use Distribution::{HeavyTailed as Heavy, Normal};
    use Layout::{Contiguous, Padded, Paged};
    use SplitPolicy::{Auto, ChunkKeys, Never};
    let mut out = Vec::new();
    let mut add = |name: &str, heads: u32, q_len: u32, seq_lens: Vec<u32>, split: SplitPolicy, layout: Layout, capacity: bool, dist: Distribution| {
        let cap = seq_lens.iter().copied().max().unwrap_or(1) + 3;
        let tag = format!("mla/bf16/{name}/h{heads}/q{q_len}/{layout:?}/{}/{split:?}/{dist:?}", if capacity { "capacity" } else { "lengths" });
        out.push(Case { name: tag, heads, q_len, seq_lens, cap, split, layout, capacity, dist, deepseek_scale: heads % 2 == 0 });
    };
    add("one-key", 16, 1, vec![1], Never, Contiguous, false, Normal);
    add("short", 16, 1, vec![17, 5, 63], Never, Contiguous, false, Heavy);
    add("stage", 8, 1, vec![64, 65, 128], Never, Contiguous, false, Normal);
    add("long", 128, 1, vec![4097], Never, Contiguous, false, Heavy);
    add("long-split", 128, 1, vec![4097, 1000], ChunkKeys(512), Contiguous, false, Heavy);
    add("auto", 128, 1, vec![3000], Auto, Contiguous, false, Normal);
    add("auto-batch", 16, 1, vec![2048, 333, 1, 700], Auto, Contiguous, false, Heavy);
    add("mtp", 128, 2, vec![2, 900, 65], ChunkKeys(256), Contiguous, false, Normal);
    add("mtp", 16, 2, vec![3000, 2], Auto, Padded, false, Heavy);
    add("spec", 16, 8, vec![8, 9, 700], ChunkKeys(128), Contiguous, false, Normal);
    add("spec", 64, 8, vec![1500], Auto, Padded, false, Heavy);
    add("odd-heads", 12, 3, vec![3, 130, 1025], ChunkKeys(64), Contiguous, false, Heavy);
    add("odd-heads", 100, 1, vec![513], Never, Contiguous, false, Normal);
    add("paged64", 128, 1, vec![4000, 64, 1], ChunkKeys(1024), Paged(64), false, Heavy);
    add("paged64", 16, 2, vec![2000, 77], Auto, Paged(64), false, Normal);
    add("paged16", 16, 1, vec![1000, 31], ChunkKeys(256), Paged(16), false, Heavy);
    add("paged1", 8, 1, vec![100], Never, Paged(1), false, Normal);
    add("paged256", 32, 4, vec![700, 300], ChunkKeys(192), Paged(256), false, Heavy);
    add("capacity", 128, 1, vec![3000, 5, 1], Auto, Contiguous, true, Normal);
    add("capacity", 16, 2, vec![2500, 70], ChunkKeys(512), Paged(64), true, Heavy);
    add("capacity", 16, 1, vec![100], Never, Padded, true, Normal);
    out
}

/// Runs a case twice: the error against the reference and the plan's
/// most splits; both outputs finite and bit-identical.
pub fn run(attn: &DecodeAttention, stream: &Stream, case: &Case, seed: u64) -> Result<(f64, u32), String> {
    let (dq, dv) = (MLA_DIMS.qk as usize, MLA_DIMS.v as usize);
    let batch = case.seq_lens.len() as u32;
    let scale = if case.deepseek_scale { 1.0 / 192f32.sqrt() } else { 1.0 / 576f32.sqrt() };
    let mut rng = Rng::new(seed);
    // Q and the compact rows [batch, cap, 576] as bf16 sees them; rows past
    // a sequence's length NaN.
    let q: Vec<f32> = round(random_values(&mut rng, (batch * case.q_len * case.heads) as usize * dq, dq, case.dist));
    let mut rows = round(random_values(&mut rng, batch as usize * case.cap as usize * dq, dq, case.dist));
    for (b, &len) in case.seq_lens.iter().enumerate() {
        rows[(b * case.cap as usize + len as usize) * dq..(b + 1) * case.cap as usize * dq].fill(f32::NAN);
    }
    let latent = LatentShape { batch, num_q_heads: case.heads, q_len: case.q_len, max_seq_len: case.cap, dims: MLA_DIMS, scale };
    let reference = latent_attention(&latent, &case.seq_lens, &q, &rows).map_err(err)?;

    let contiguous = DecodeShape { scale: Some(scale), ..DecodeShape::latent(batch, case.heads, case.q_len, case.cap) };
    // The device cache in the case's layout (elements), and the block table.
    let (shape, cache, table) = match case.layout {
        Layout::Contiguous => (contiguous.clone(), rows.clone(), Vec::new()),
        Layout::Padded => {
            let (token, seq) = (640usize, (case.cap as usize + 8) * 640);
            let mut cache = vec![f32::NAN; batch as usize * seq];
            for b in 0..batch as usize {
                for t in 0..case.cap as usize {
                    cache[b * seq + t * token..][..dq].copy_from_slice(&rows[(b * case.cap as usize + t) * dq..][..dq]);
                }
            }
            let layout = KvLayout::Strided { batch: seq as u64, token: token as u64, head: dq as u64 };
            (DecodeShape { kv_layout: layout, ..contiguous.clone() }, cache, Vec::new())
        }
        Layout::Paged(page) => {
            let per_seq = case.cap.div_ceil(page) as usize;
            let num_pages = batch as usize * per_seq + 3;
            let mut ids: Vec<i32> = (0..num_pages as i32).collect();
            for i in (1..ids.len()).rev() {
                ids.swap(i, rng.below(i as u64 + 1) as usize);
            }
            let table: Vec<i32> = ids[..batch as usize * per_seq].to_vec();
            let mut cache = vec![f32::NAN; num_pages * page as usize * dq];
            for (b, &len) in case.seq_lens.iter().enumerate() {
                for t in 0..len as usize {
                    let at = (table[b * per_seq + t / page as usize] as usize * page as usize + t % page as usize) * dq;
                    cache[at..at + dq].copy_from_slice(&rows[(b * case.cap as usize + t) * dq..][..dq]);
                }
            }
            let layout = KvLayout::Paged { page_size: page, num_pages: num_pages as u32, order: PageOrder::TokenMajor, page_bytes: None };
            (DecodeShape { kv_layout: layout, ..contiguous.clone() }, cache, table)
        }
    };
    let opts = PlanOptions { split: case.split, ..Default::default() };
    let plan = match (case.capacity, table.is_empty()) {
        (true, _) => attn.plan_capacity(&shape, &opts),
        (false, true) => attn.plan(&shape, &case.seq_lens, &opts),
        (false, false) => attn.plan_paged(&shape, &case.seq_lens, &table, &opts),
    }
    .map_err(err)?;
    if plan.family() != decode_attn::Family::Mla {
        return Err(format!("planned the {} family", plan.family().name()));
    }
    let q_dev = DeviceBuffer::from_slice(&to_bf16(&q)).map_err(err)?;
    let kv_dev = DeviceBuffer::from_slice(&to_bf16(&cache)).map_err(err)?;
    let lens_dev = DeviceBuffer::from_slice(&case.seq_lens).map_err(err)?;
    let table_dev = DeviceBuffer::from_slice(if table.is_empty() { &[0i32][..] } else { &table }).map_err(err)?;
    let n_o = (batch * case.q_len * case.heads) as usize * dv;
    let mut o = DeviceBuffer::from_slice(&vec![bf16::from_bits(0x7FFF); n_o]).map_err(err)?;
    let mut ws = Workspace::for_plan(&plan).map_err(err)?;
    let kv = KvCache::latent(&kv_dev);
    let step = if table.is_empty() { StepInputs::lengths(&lens_dev) } else { StepInputs::paged(&lens_dev, &table_dev) };
    let mut outs = Vec::new();
    for _ in 0..2 {
        o.copy_from(&vec![bf16::from_bits(0x7FFF); n_o]).map_err(err)?;
        if case.capacity {
            attn.run_step(&plan, &step, &q_dev, &kv, &mut o, &mut ws, stream).map_err(err)?;
        } else {
            attn.run(&plan, &q_dev, &kv, &mut o, &mut ws, stream).map_err(err)?;
        }
        stream.synchronize().map_err(|e| format!("kernel failed: {e}"))?;
        let mut host = vec![bf16::ZERO; n_o];
        o.copy_to(&mut host).map_err(err)?;
        outs.push(host.iter().map(|x| x.to_f32()).collect::<Vec<f32>>());
    }
    let cmp = decode_attn::reference::relative_l2_error(&outs[0], &reference).map_err(err)?;
    if cmp.nonfinite {
        let first = outs[0].iter().position(|x| !x.is_finite()).unwrap_or(0);
        return Err(format!("non-finite output (first at element {first}); rel_l2={:.2e}", cmp.rel_l2));
    }
    if outs[0].iter().zip(&outs[1]).any(|(a, b)| a.to_bits() != b.to_bits()) {
        return Err("two runs on the same inputs differ (a race?)".into());
    }
    Ok((cmp.rel_l2, plan.max_splits()))
}

fn round(x: Vec<f32>) -> Vec<f32> {
    x.into_iter().map(|v| bf16::from_f32(v).to_f32()).collect()
}

fn to_bf16(x: &[f32]) -> Vec<bf16> {
    x.iter().map(|&v| bf16::from_f32(v)).collect()
}
