//! MLA (the latent family): a latent cache of 576-value rows, V the first
//! 512 of each, bf16, fp8 e4m3 with a scale per token (`Fp8PerHead`, every
//! value quantized) or DeepSeek V3.2's 656-byte rows (`Fp8DsMla`), against
//! the f64 reference (`reference::latent_attention`, on the dequantized
//! rows for fp8) on random inputs — rows past each sequence's length NaN, O poisoned with
//! NaN, every case run twice and compared bit for bit. Contiguous, padded
//! and paged caches (pages in a random order, unused pages NaN), plans of
//! host lengths and capacity plans of device lengths, split and not. An
//! fp8 case's cache is quantized on the GPU and must equal the CPU
//! quantizer's bits (rows past each length are NaN codes and NaN scales,
//! or 0x7F bytes);
//! every case appends its last token's rows on the GPU and checks them.

use decode_attn::cust::memory::{CopyDestination, DeviceBuffer};
use decode_attn::cust::stream::Stream;
use decode_attn::half::bf16;
use decode_attn::reference::{latent_attention, LatentShape};
use decode_attn::testing::{random_values, Distribution, Rng};
use decode_attn::quant::{dequantize_cache, quantize_cache, quantize_ds_mla_row, quantize_fp8_row};
use decode_attn::{DecodeAttention, DecodeShape, KvCache, KvFormat, KvLayout, KvMut, MergeChoice, PageOrder, PlanOptions, SplitPolicy, StepInputs, TransposeChoice, Workspace};
use decode_attn_abi::{MLA_DIMS, MLA_T_ROWS};

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
    /// `Bf16`, `Fp8PerHead` or `Fp8DsMla`.
    pub format: KvFormat,
    /// `Always`: a transposed kernel (16 rows a block), `Never`: the
    /// 64-row one, `Auto`: the planner's rule (asserted: transposed
    /// exactly where `mla_transposed` or `mla_transposed_rows` say).
    pub transpose: TransposeChoice,
    /// `Cluster`: a split sequence's chunks merged in a thread-block
    /// cluster (the 64-row kernel's cluster form; asserted), else the
    /// planner's rule.
    pub merge: MergeChoice,
}

/// The cases: head counts of tensor-parallel shards (8, 16) to a whole
/// DeepSeek layer (128) and an odd one; q_len 1 (decode), 2 (multi-token
/// prediction), 3 and 8 (speculative steps); lengths below, at and past a
/// stage (64) and a chunk, ragged; every layout; split and not; each in
/// every latent format. A case of at most 16 rows (32 of an fp8 cache)
/// runs on both kernels: the transposed (`…/transposed`, 16 rows a block;
/// past 16, the row-chunk form, an item's chunks consecutive blocks) and
/// the 64-row one (`…/64-row`); the `t-…` cases are the transposed
/// kernels' edges (1, 15, 16, 17, 24, 32, 36 and 128 rows, one stage per
/// warpgroup or an odd count).
/// `n` ragged lengths of at most `most` keys (down to four fifths of it).
pub fn balanced_lens(n: u32, most: u32) -> Vec<u32> {
    (0..n).map(|b| most - (b * 7919 + 13) % (most / 5)).collect()
}

#[allow(dead_code)] // the fuzzer makes its own (`fuzz --mla`)
pub fn cases() -> Vec<Case> {
    use Distribution::{HeavyTailed as Heavy, Normal};
    use Layout::{Contiguous, Padded, Paged};
    use SplitPolicy::{Auto, ChunkKeys, Never};
    let mut out = Vec::new();
    let mut add = |name: &str, heads: u32, q_len: u32, seq_lens: Vec<u32>, split: SplitPolicy, layout: Layout, capacity: bool, dist: Distribution| {
        let cap = seq_lens.iter().copied().max().unwrap_or(1) + 3;
        for format in LATENT_FORMATS {
            let tag = format!("mla/{}/{name}/h{heads}/q{q_len}/{layout:?}/{}/{split:?}/{dist:?}", format.name(), if capacity { "capacity" } else { "lengths" });
            // (Past 16 rows the transposed kernel is the fp8 formats' row chunks.)
            let both = heads * q_len <= MLA_T_ROWS || (heads * q_len <= 2 * MLA_T_ROWS && format != KvFormat::Bf16);
            let kernels: &[(TransposeChoice, &str)] = if both { &[(TransposeChoice::Always, "/transposed"), (TransposeChoice::Never, "/64-row")] } else { &[(TransposeChoice::Auto, "")] };
            for &(transpose, suffix) in kernels {
                out.push(Case { name: format!("{tag}{suffix}"), heads, q_len, seq_lens: seq_lens.clone(), cap, split, layout, capacity, dist, deepseek_scale: heads % 2 == 0, format, transpose, merge: MergeChoice::Auto });
            }
        }
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
    // Balanced pieces (`heuristics::mla_balanced`): more blocks than a
    // wave, sequences cut between runs of an equal share and merged
    // (`tests/plan.rs` checks these lengths plan so).
    add("balanced", 64, 1, balanced_lens(150, 700), Auto, Contiguous, false, Heavy);
    add("balanced", 128, 1, balanced_lens(67, 800), Auto, Paged(64), false, Normal);
    add("balanced", 64, 2, balanced_lens(70, 1000), Auto, Padded, false, Heavy);
    add("t-one-row", 1, 1, vec![70, 1], Never, Contiguous, false, Heavy);
    add("t-rows15", 5, 3, vec![200, 64, 3], ChunkKeys(64), Contiguous, false, Normal);
    add("t-rows16", 8, 2, vec![3000, 129], Auto, Paged(64), false, Heavy);
    add("t-long", 16, 1, vec![4097, 2048, 65], Auto, Padded, false, Normal);
    add("t-odd-stages", 16, 1, vec![192, 320], ChunkKeys(192), Paged(16), false, Heavy);
    add("t-capacity", 16, 1, vec![2000, 64], Auto, Paged(64), true, Normal);
    // Two row chunks: the second's rows 16.. (a token's causal limit, the
    // output's and the partials' rows), its blocks beside the first's.
    add("t-rows17", 17, 1, vec![300, 64, 1], ChunkKeys(128), Contiguous, false, Heavy);
    add("t-rows24", 8, 3, vec![1000, 70], Auto, Paged(16), false, Normal);
    add("t-rows32", 16, 2, vec![2500, 3], Auto, Padded, false, Heavy);
    add("t-rows32-capacity", 16, 2, vec![700, 130], ChunkKeys(256), Paged(64), true, Normal);
    // `Always` past 32 rows (not `Auto`'s): three and eight row chunks of
    // the fp8 formats, split, the last chunk partly padding.
    for (name, heads, q_len, seq_lens, split) in [("t-rows36", 12, 3, vec![900, 65, 3], ChunkKeys(256)), ("t-rows128", 128, 1, vec![1500, 64], Auto)] {
        for format in [KvFormat::Fp8PerHead, KvFormat::Fp8DsMla] {
            let cap = seq_lens.iter().copied().max().unwrap_or(1) + 3;
            let name = format!("mla/{}/{name}/h{heads}/q{q_len}/Contiguous/lengths/{split:?}/Heavy/transposed", format.name());
            out.push(Case { name, heads, q_len, seq_lens: seq_lens.clone(), cap, split, layout: Contiguous, capacity: false, dist: Heavy, deepseek_scale: true, format, transpose: TransposeChoice::Always, merge: MergeChoice::Auto });
        }
    }
    // The cluster merge (the 64-row kernel): a sequence's chunks one
    // cluster of 2, 4 or 8 blocks, a row chunk's (128 heads: two row
    // chunks of clusters); shorter sequences' ranks past their chunks
    // empty; capacity plans (the chunks past a step's lengths).
    for (name, heads, q_len, seq_lens, split, layout, capacity) in [
        ("cluster2", 128, 1, vec![3000, 1000, 5], ChunkKeys(2048), Contiguous, false),
        ("cluster4", 64, 2, vec![4097, 2000, 64, 2], ChunkKeys(1100), Paged(64), false),
        ("cluster4-capacity", 128, 1, vec![2500, 70, 1], ChunkKeys(1024), Padded, true),
        ("cluster8", 16, 1, vec![8000, 3, 1500], ChunkKeys(1024), Paged(16), false),
        ("cluster2-rows36", 12, 3, vec![900, 65, 3], ChunkKeys(512), Contiguous, false),
    ] {
        for format in LATENT_FORMATS {
            let cap = seq_lens.iter().copied().max().unwrap_or(1) + 3;
            let name = format!("mla/{}/{name}/h{heads}/q{q_len}/{layout:?}/{}/{split:?}/Heavy/64-row", format.name(), if capacity { "capacity" } else { "lengths" });
            out.push(Case { name, heads, q_len, seq_lens: seq_lens.clone(), cap, split, layout, capacity, dist: Heavy, deepseek_scale: true, format, transpose: TransposeChoice::Never, merge: MergeChoice::Cluster });
        }
    }
    out
}

/// The formats that hold latent rows, each case run in all.
pub const LATENT_FORMATS: [KvFormat; 3] = [KvFormat::Bf16, KvFormat::Fp8PerHead, KvFormat::Fp8DsMla];

/// Runs a case twice: the error against the reference and the plan's
/// most splits; both outputs finite and bit-identical.
pub fn run(attn: &DecodeAttention, stream: &Stream, case: &Case, seed: u64) -> Result<(f64, u32), String> {
    let (dq, dv) = (MLA_DIMS.qk as usize, MLA_DIMS.v as usize);
    let batch = case.seq_lens.len() as u32;
    let scale = if case.deepseek_scale { 1.0 / 192f32.sqrt() } else { 1.0 / 576f32.sqrt() };
    let fp8 = case.format.is_quantized();
    // A row's elements in the cache (656 bytes for fp8-ds-mla) and whether
    // scales sit beside the rows.
    let row = case.format.row_len(MLA_DIMS.qk) as usize;
    let beside = decode_attn::check::scale_elem(case.format).is_some();
    let mut rng = Rng::new(seed);
    // Q and the compact rows [batch, cap, 576] as bf16 sees them; rows past
    // a sequence's length NaN.
    let q: Vec<f32> = round(random_values(&mut rng, (batch * case.q_len * case.heads) as usize * dq, dq, case.dist));
    let mut rows = round(random_values(&mut rng, batch as usize * case.cap as usize * dq, dq, case.dist));
    for (b, &len) in case.seq_lens.iter().enumerate() {
        rows[(b * case.cap as usize + len as usize) * dq..(b + 1) * case.cap as usize * dq].fill(f32::NAN);
    }
    let contiguous = DecodeShape { scale: Some(scale), kv_format: case.format, ..DecodeShape::latent(batch, case.heads, case.q_len, case.cap) };
    let lens_dev = DeviceBuffer::from_slice(&case.seq_lens).map_err(err)?;
    // fp8: the GPU's quantization of the compact rows, which must be the
    // CPU quantizer's bits; the reference reads the dequantized rows.
    let (compact, scales, seen) = if fp8 {
        let (bytes, words) = quantize_on_gpu(attn, stream, &contiguous, &lens_dev, &case.seq_lens, &rows)?;
        let seen = dequantize_cache(&contiguous, &case.seq_lens, &bytes, &words).map_err(err)?;
        (bytes.iter().map(|&b| b as u16).collect::<Vec<u16>>(), words, seen)
    } else {
        (to_bf16(&rows).iter().map(|x| x.to_bits()).collect(), Vec::new(), rows.clone())
    };
    let latent = LatentShape { batch, num_q_heads: case.heads, q_len: case.q_len, max_seq_len: case.cap, dims: MLA_DIMS, scale };
    let reference = latent_attention(&latent, &case.seq_lens, &q, &seen).map_err(err)?;

    // The device cache in the case's layout (values: bf16 bits or fp8
    // bytes; NaN or NaN codes elsewhere), its scales, and the block table.
    let nan = if fp8 { 0x7F } else { 0x7FC0 };
    let (shape, table) = match case.layout {
        Layout::Contiguous => (contiguous.clone(), Vec::new()),
        Layout::Padded => {
            let token = row as u64 + 64;
            let layout = KvLayout::Strided { batch: (case.cap as u64 + 8) * token, token, head: row as u64 };
            (DecodeShape { kv_layout: layout, ..contiguous.clone() }, Vec::new())
        }
        Layout::Paged(page) => {
            let per_seq = case.cap.div_ceil(page) as usize;
            let num_pages = batch as usize * per_seq + 3;
            let mut ids: Vec<i32> = (0..num_pages as i32).collect();
            for i in (1..ids.len()).rev() {
                ids.swap(i, rng.below(i as u64 + 1) as usize);
            }
            let layout = KvLayout::Paged { page_size: page, num_pages: num_pages as u32, order: PageOrder::TokenMajor, page_bytes: None };
            (DecodeShape { kv_layout: layout, ..contiguous.clone() }, ids[..batch as usize * per_seq].to_vec())
        }
    };
    // Where row (b, t) and its scale go in `shape`'s layout.
    let per_seq = if table.is_empty() { 0 } else { case.cap.div_ceil(1 << page_shift(&shape)) as usize };
    let place = |s: &DecodeShape, b: usize, t: usize| -> (usize, usize) {
        let (kv, side) = (s.kv_strides(), s.scale_strides());
        let paged = matches!(s.kv_layout, KvLayout::Paged { .. });
        let (slot, tok) = if paged { (table[b * per_seq + (t >> page_shift(s))] as usize, t & ((1 << page_shift(s)) - 1)) } else { (b, t) };
        ((slot as u64 * kv.batch + tok as u64 * kv.token) as usize, (slot as u64 * side.batch + tok as u64 * side.token) as usize)
    };
    let mut cache = vec![nan; shape.kv_elems_required().ok_or("cache size")? as usize];
    // (A bf16 cache has no scales; the buffer is not passed.)
    let mut side = vec![f32::NAN.to_bits(); (shape.scale_bytes_required().unwrap_or(0) / 4).max(1) as usize];
    for (b, &len) in case.seq_lens.iter().enumerate() {
        for t in 0..len as usize {
            let (at, si) = place(&shape, b, t);
            let (from, from_si) = place(&contiguous, b, t);
            cache[at..at + row].copy_from_slice(&compact[from..from + row]);
            if beside {
                side[si] = scales[from_si];
            }
        }
    }
    let opts = PlanOptions { split: case.split, transpose: case.transpose, merge: case.merge, ..Default::default() };
    let plan = match (case.capacity, table.is_empty()) {
        (true, _) => attn.plan_capacity(&shape, &opts),
        (false, true) => attn.plan(&shape, &case.seq_lens, &opts),
        (false, false) => attn.plan_paged(&shape, &case.seq_lens, &table, &opts),
    }
    .map_err(err)?;
    if plan.family() != decode_attn::Family::Mla {
        return Err(format!("planned the {} family", plan.family().name()));
    }
    let transposed = match case.transpose {
        TransposeChoice::Always => true,
        TransposeChoice::Never => false,
        TransposeChoice::Auto => decode_attn::heuristics::mla_transposed(case.heads * case.q_len) || decode_attn::heuristics::mla_transposed_rows(case.heads * case.q_len, case.format),
    };
    if plan.transposed() != transposed {
        return Err(format!("planned the {} kernel", if plan.transposed() { "transposed" } else { "64-row" }));
    }
    if case.merge == MergeChoice::Cluster && (plan.cluster() < 2 || plan.kernel_id().merge != decode_attn_abi::Merge::Cluster) {
        return Err(format!("planned no cluster merge (cluster {})", plan.cluster()));
    }
    let q_dev = DeviceBuffer::from_slice(&to_bf16(&q)).map_err(err)?;
    let table_dev = DeviceBuffer::from_slice(if table.is_empty() { &[0i32][..] } else { &table }).map_err(err)?;
    let step = if table.is_empty() { StepInputs::lengths(&lens_dev) } else { StepInputs::paged(&lens_dev, &table_dev) };
    let (mut kv16, mut kv8) = (None, None);
    if fp8 {
        kv8 = Some(DeviceBuffer::from_slice(&cache.iter().map(|&b| b as u8).collect::<Vec<u8>>()).map_err(err)?);
    } else {
        kv16 = Some(DeviceBuffer::from_slice(&cache.iter().map(|&b| bf16::from_bits(b)).collect::<Vec<bf16>>()).map_err(err)?);
    }
    let mut side_dev = DeviceBuffer::from_slice(&side.iter().map(|&w| f32::from_bits(w)).collect::<Vec<f32>>()).map_err(err)?;
    // The last token's rows appended on the GPU over the same values.
    append_last_rows(attn, stream, &shape, &step, &case.seq_lens, case.q_len, &rows, kv16.as_mut(), kv8.as_mut(), &mut side_dev, &cache, &side, &place)?;
    let n_o = (batch * case.q_len * case.heads) as usize * dv;
    let mut o = DeviceBuffer::from_slice(&vec![bf16::from_bits(0x7FFF); n_o]).map_err(err)?;
    let mut ws = Workspace::for_plan(&plan).map_err(err)?;
    let kv = match (&kv16, &kv8) {
        (Some(k), _) => KvCache::latent(k),
        (_, Some(k)) if beside => KvCache::latent_quantized(k, &side_dev),
        (_, Some(k)) => KvCache::latent(k),
        _ => unreachable!(),
    };
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

/// The names of the code tests (`every_code`), a split policy each.
#[allow(dead_code)] // (the fuzzer runs none)
pub const CODE_TESTS: [(&str, SplitPolicy); 2] =
    [("mla/fp8-per-head/every-finite-e4m3-code/unsplit", SplitPolicy::Never), ("mla/fp8-per-head/every-finite-e4m3-code/split", SplitPolicy::ChunkKeys(128))];

/// Every finite e4m3 code reads as its value, exactly: 256 identical keys
/// (four stages, both buffers twice) of scale 1 whose V holds each of the
/// 254 finite codes (`0x7E` for the NaN codes `0x7F`, `0xFF`, which are
/// never written for finite input), so that every P is 1 and each head's
/// output row is V itself. Random rows cannot show a wrong code: their
/// rare small codes weigh nothing in the error.
#[allow(dead_code)]
pub fn every_code(attn: &DecodeAttention, stream: &Stream, split: SplitPolicy, seed: u64) -> Result<(f64, u32), String> {
    let (dq, dv, heads, len) = (MLA_DIMS.qk as usize, MLA_DIMS.v as usize, 8u32, 256u32);
    let shape = DecodeShape { kv_format: KvFormat::Fp8PerHead, ..DecodeShape::latent(1, heads, 1, len) };
    // V: the finite codes, each twice; the RoPE part small finite codes.
    let finite = |code: u8| if code & 0x7F == 0x7F { 0x7E } else { code };
    let row: Vec<u8> = (0..dq).map(|i| if i < dv { finite((i % 256) as u8) } else { 0x20 + (i % 8) as u8 }).collect();
    let cache: Vec<u8> = (0..len as usize).flat_map(|_| row.iter().copied()).collect();
    let value = |code: u8| -> f32 {
        let (sign, e, m) = (if code & 0x80 != 0 { -1.0 } else { 1.0 }, ((code >> 3) & 0xF) as i32, (code & 7) as f32);
        sign * if e == 0 { m * 2f32.powi(-9) } else { 2f32.powi(e - 7) * (1.0 + m / 8.0) }
    };
    let mut rng = Rng::new(seed);
    let q = round(random_values(&mut rng, heads as usize * dq, dq, Distribution::Normal));
    let kv = DeviceBuffer::from_slice(&cache).map_err(err)?;
    let scales = DeviceBuffer::from_slice(&vec![1.0f32; len as usize]).map_err(err)?;
    let q_dev = DeviceBuffer::from_slice(&to_bf16(&q)).map_err(err)?;
    let plan = attn.plan(&shape, &[len], &PlanOptions { split, ..Default::default() }).map_err(err)?;
    let mut ws = Workspace::for_plan(&plan).map_err(err)?;
    let n_o = heads as usize * dv;
    let mut o = DeviceBuffer::from_slice(&vec![bf16::from_bits(0x7FFF); n_o]).map_err(err)?;
    attn.run(&plan, &q_dev, &KvCache::latent_quantized(&kv, &scales), &mut o, &mut ws, stream).map_err(err)?;
    stream.synchronize().map_err(|e| format!("kernel failed: {e}"))?;
    let mut host = vec![bf16::ZERO; n_o];
    o.copy_to(&mut host).map_err(err)?;
    for (i, x) in host.iter().enumerate() {
        let code = row[i % dv];
        // (−0 reads as +0: the accumulator starts at +0.)
        if x.to_f32() != value(code) {
            return Err(format!("code {code:#04x} (head {}, value {}) read as {}", i / dv, value(code), x.to_f32()));
        }
    }
    Ok((0.0, plan.max_splits()))
}

/// The scale-spread tests (`spread_groups`): a name, the kernel, the
/// exponent step between a key's groups, and whether each group's dims
/// must hold the bound on their own (else the rows' norm).
#[allow(dead_code)] // (the fuzzer runs none)
pub const SPREAD_TESTS: [(&str, TransposeChoice, i32, bool); 4] = [
    ("mla/fp8-ds-mla/groups-2^8-apart/each-group/transposed", TransposeChoice::Always, 8, true),
    ("mla/fp8-ds-mla/groups-2^8-apart/each-group/64-row", TransposeChoice::Never, 8, true),
    ("mla/fp8-ds-mla/groups-2^14-apart/rows/transposed", TransposeChoice::Always, 14, false),
    ("mla/fp8-ds-mla/groups-2^14-apart/rows/64-row", TransposeChoice::Never, 14, false),
];

/// fp8-ds-mla keys whose four scale groups lie far apart: group `i` of
/// every key is `2^(-step · i)` times group 0 (and the RoPE part group
/// 0's size), so the transposed ring kernel's P tiles, `P · s_i` in f16
/// with the exponent of the key's largest scale in the softmax base
/// (docs/formats.md, "fp8-ds-mla in the transposed kernel"), carry
/// group 3 `2^(3 · step)` below group 0. At `step` 8 (group 3 2^24 below)
/// each group's dims must keep the bound on their own (the relative L2 of
/// the dims of that group of every output row), which holds while the
/// tiles stay in f16's normal range; at 14 (2^42, the last groups among
/// f16's subnormals or flushed) the error must still keep the bound in
/// the rows' norm, where those dims weigh nothing. Random rows never show
/// this: their groups are within a few powers of two.
#[allow(dead_code)]
pub fn spread_groups(attn: &DecodeAttention, stream: &Stream, transpose: TransposeChoice, step: i32, each_group: bool, seed: u64) -> Result<(f64, u32), String> {
    let (dq, dv, heads) = (MLA_DIMS.qk as usize, MLA_DIMS.v as usize, 16u32);
    let group = decode_attn_abi::DS_MLA_GROUP as usize;
    let seq_lens = vec![700u32, 130];
    let (batch, cap) = (seq_lens.len() as u32, 700u32);
    let shape = DecodeShape { scale: Some(1.0 / 192f32.sqrt()), kv_format: KvFormat::Fp8DsMla, ..DecodeShape::latent(batch, heads, 1, cap) };
    let mut rng = Rng::new(seed);
    let q = round(random_values(&mut rng, (batch * heads) as usize * dq, dq, Distribution::Normal));
    let mut rows = random_values(&mut rng, (batch * cap) as usize * dq, dq, Distribution::Normal);
    for (i, x) in rows.iter_mut().enumerate() {
        let dim = i % dq;
        if dim < 4 * group {
            *x *= 2f32.powi(-step * (dim / group) as i32);
        }
    }
    let rows = round(rows);
    let (bytes, _) = quantize_cache(&shape, &seq_lens, &rows).map_err(err)?;
    let seen = dequantize_cache(&shape, &seq_lens, &bytes, &[]).map_err(err)?;
    let latent = LatentShape { batch, num_q_heads: heads, q_len: 1, max_seq_len: cap, dims: MLA_DIMS, scale: shape.scale.unwrap_or(1.0) };
    let reference = latent_attention(&latent, &seq_lens, &q, &seen).map_err(err)?;
    let plan = attn.plan(&shape, &seq_lens, &PlanOptions { transpose, ..Default::default() }).map_err(err)?;
    if plan.transposed() != matches!(transpose, TransposeChoice::Always) {
        return Err(format!("planned the {} kernel", if plan.transposed() { "transposed" } else { "64-row" }));
    }
    let kv = DeviceBuffer::from_slice(&bytes).map_err(err)?;
    let q_dev = DeviceBuffer::from_slice(&to_bf16(&q)).map_err(err)?;
    let mut ws = Workspace::for_plan(&plan).map_err(err)?;
    let n_o = (batch * heads) as usize * dv;
    let mut o = DeviceBuffer::from_slice(&vec![bf16::from_bits(0x7FFF); n_o]).map_err(err)?;
    let mut outs = Vec::new();
    for _ in 0..2 {
        o.copy_from(&vec![bf16::from_bits(0x7FFF); n_o]).map_err(err)?;
        attn.run(&plan, &q_dev, &KvCache::latent(&kv), &mut o, &mut ws, stream).map_err(err)?;
        stream.synchronize().map_err(|e| format!("kernel failed: {e}"))?;
        let mut host = vec![bf16::ZERO; n_o];
        o.copy_to(&mut host).map_err(err)?;
        outs.push(host.iter().map(|x| x.to_f32()).collect::<Vec<f32>>());
    }
    if outs[0].iter().zip(&outs[1]).any(|(a, b)| a.to_bits() != b.to_bits()) {
        return Err("two runs on the same inputs differ (a race?)".into());
    }
    if !each_group {
        let cmp = decode_attn::reference::relative_l2_error(&outs[0], &reference).map_err(err)?;
        if cmp.nonfinite {
            return Err(format!("non-finite output; rel_l2={:.2e}", cmp.rel_l2));
        }
        return Ok((cmp.rel_l2, plan.max_splits()));
    }
    // Group `i`'s dims of every row, compared on their own.
    let mut worst = 0f64;
    for i in 0..4 {
        let pick = |x: &[f32]| -> Vec<f32> { x.iter().enumerate().filter(|(at, _)| (at % dv) / group == i).map(|(_, &v)| v).collect() };
        let theirs: Vec<f64> = reference.iter().enumerate().filter(|(at, _)| (at % dv) / group == i).map(|(_, &v)| v).collect();
        let cmp = decode_attn::reference::relative_l2_error(&pick(&outs[0]), &theirs).map_err(err)?;
        if cmp.nonfinite {
            return Err(format!("non-finite output in group {i}"));
        }
        if cmp.rel_l2 > 1e-2 {
            return Err(format!("group {i} (2^{} below group 0): rel_l2 {:.2e} on its own dims", step * i as i32, cmp.rel_l2));
        }
        worst = worst.max(cmp.rel_l2);
    }
    Ok((worst, plan.max_splits()))
}

fn page_shift(s: &DecodeShape) -> u32 {
    match s.kv_layout {
        KvLayout::Paged { page_size, .. } => page_size.trailing_zeros(),
        _ => 0,
    }
}

/// The fp8 cache of the compact rows as the GPU quantizes them (`quantize_kv`),
/// checked against the CPU quantizer bit for bit on every row of every
/// sequence (values and scale; fp8-ds-mla's rows hold theirs).
fn quantize_on_gpu(attn: &DecodeAttention, stream: &Stream, shape: &DecodeShape, lens_dev: &DeviceBuffer<u32>, seq_lens: &[u32], rows: &[f32]) -> Result<(Vec<u8>, Vec<u32>), String> {
    let (cpu_bytes, cpu_words) = quantize_cache(shape, seq_lens, rows).map_err(err)?;
    let plain = DeviceBuffer::from_slice(&to_bf16(rows)).map_err(err)?;
    let mut data = DeviceBuffer::from_slice(&vec![0x7Fu8; cpu_bytes.len()]).map_err(err)?;
    let mut side = DeviceBuffer::from_slice(&vec![f32::NAN; cpu_words.len().max(1)]).map_err(err)?;
    let out = if cpu_words.is_empty() { KvMut::plain(&mut data) } else { KvMut::quantized(&mut data, &mut side) };
    attn.quantize_kv(shape, &StepInputs::lengths(lens_dev), &plain, out, stream).map_err(err)?;
    stream.synchronize().map_err(|e| format!("quantize failed: {e}"))?;
    let mut bytes = vec![0u8; cpu_bytes.len()];
    let mut scales = vec![0f32; cpu_words.len().max(1)];
    data.copy_to(&mut bytes).map_err(err)?;
    side.copy_to(&mut scales).map_err(err)?;
    scales.truncate(cpu_words.len());
    let d = shape.kv_format.row_len(MLA_DIMS.qk) as usize;
    let (st, ss) = (shape.kv_strides(), shape.scale_strides());
    for (b, &len) in seq_lens.iter().enumerate() {
        for t in 0..len as usize {
            let (at, si) = ((b as u64 * st.batch + t as u64 * st.token) as usize, (b as u64 * ss.batch + t as u64 * ss.token) as usize);
            if bytes[at..at + d] != cpu_bytes[at..at + d] || scales.get(si).map(|x| x.to_bits()) != cpu_words.get(si).copied() {
                return Err(format!("GPU quantization of row ({b}, {t}) differs from the CPU quantizer's"));
            }
        }
    }
    Ok((bytes, scales.iter().map(|x| x.to_bits()).collect()))
}

/// Appends each sequence's last `q_len` rows with `append_kv` (a copy for
/// bf16, the fp8 quantizer's bits and scale, or its 656-byte row) over the cache as uploaded,
/// and checks that every value and scale is as before: the append writes
/// exactly the rows, in the layout, that the CPU puts there.
#[allow(clippy::too_many_arguments)]
fn append_last_rows(
    attn: &DecodeAttention,
    stream: &Stream,
    shape: &DecodeShape,
    step: &StepInputs,
    seq_lens: &[u32],
    q_len: u32,
    rows: &[f32],
    kv16: Option<&mut DeviceBuffer<bf16>>,
    kv8: Option<&mut DeviceBuffer<u8>>,
    side: &mut DeviceBuffer<f32>,
    cache: &[u16],
    scales: &[u32],
    place: &dyn Fn(&DecodeShape, usize, usize) -> (usize, usize),
) -> Result<(), String> {
    let d = MLA_DIMS.qk as usize;
    let cap = shape.max_seq_len as usize;
    // [batch, q_len, 1, 576]: each sequence's last q_len rows (lengths below
    // q_len are not appended to: the kernel skips them).
    let mut new_rows = vec![bf16::ZERO; seq_lens.len() * q_len as usize * d];
    for (b, &len) in seq_lens.iter().enumerate() {
        for i in 0..q_len as usize {
            if len >= q_len {
                let t = len as usize - q_len as usize + i;
                for (x, &v) in new_rows[(b * q_len as usize + i) * d..][..d].iter_mut().zip(&rows[(b * cap + t) * d..][..d]) {
                    *x = bf16::from_f32(v);
                }
            }
        }
    }
    let new_dev = DeviceBuffer::from_slice(&new_rows).map_err(err)?;
    match (kv16, kv8) {
        (Some(k), _) => {
            attn.append_kv(shape, step, &new_dev, KvMut::plain(&mut *k), stream).map_err(err)?;
            stream.synchronize().map_err(|e| format!("append failed: {e}"))?;
            let mut host = vec![bf16::ZERO; cache.len()];
            k.copy_to(&mut host).map_err(err)?;
            if host.iter().zip(cache).any(|(a, &b)| a.to_bits() != b) {
                return Err("a bf16 append changed the cache (a row in the wrong place?)".into());
            }
        }
        (_, Some(k)) => {
            // (fp8-ds-mla rows hold their scales.)
            let ds = shape.kv_format == decode_attn::KvFormat::Fp8DsMla;
            let out = if ds { KvMut::plain(&mut *k) } else { KvMut::quantized(&mut *k, &mut *side) };
            attn.append_kv(shape, step, &new_dev, out, stream).map_err(err)?;
            stream.synchronize().map_err(|e| format!("append failed: {e}"))?;
            let (mut host, mut host_side) = (vec![0u8; cache.len()], vec![0f32; side.len()]);
            k.copy_to(&mut host).map_err(err)?;
            side.copy_to(&mut host_side).map_err(err)?;
            host_side.truncate(scales.len());
            let row = shape.kv_format.row_len(d as u32) as usize;
            for (b, &len) in seq_lens.iter().enumerate() {
                for i in 0..q_len.min(len) as usize {
                    let t = len as usize - q_len.min(len) as usize + i;
                    let (at, si) = place(shape, b, t);
                    let mut want = vec![0u8; row];
                    let x = &rows[(b * cap + t) * d..][..d];
                    let s = if ds {
                        quantize_ds_mla_row(x, &mut want);
                        None
                    } else {
                        Some(quantize_fp8_row(x, &mut want).to_bits())
                    };
                    if host[at..at + row] != want[..] || s.is_some_and(|s| host_side[si].to_bits() != s) {
                        return Err(format!("the fp8 append of row ({b}, {t}) differs from the CPU quantizer's"));
                    }
                }
            }
            if host.iter().zip(cache).any(|(&a, &b)| a as u16 != b) || host_side.iter().zip(scales).any(|(a, &b)| a.to_bits() != b) {
                return Err("an fp8 append changed the cache (a row in the wrong place?)".into());
            }
        }
        _ => unreachable!(),
    }
    Ok(())
}

fn round(x: Vec<f32>) -> Vec<f32> {
    x.into_iter().map(|v| bf16::from_f32(v).to_f32()).collect()
}

fn to_bf16(x: &[f32]) -> Vec<bf16> {
    x.iter().map(|&v| bf16::from_f32(v)).collect()
}
