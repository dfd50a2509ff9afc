//! Speculative decoding's draft trees (`VariantSpec::tree`): every format,
//! each kernel family that serves it, alone and with a window and sinks or
//! a soft-cap, through plans of host lengths and capacity plans (lengths on
//! the device), contiguous and paged, q_len 2 to 8. Each sequence's new
//! tokens form a random tree (`common::random_tree`: forests, chains,
//! siblings); the new tokens' K rows are 16 times larger than the prefix's,
//! so a token a row should not see and does dominates the row. And a chain
//! (token i sees tokens 0..=i at their causal positions) gives the causal
//! step's output bit for bit, in the same kernel.

use decode_attn::cust::stream::Stream;
use decode_attn::testing::{problem_inputs, Distribution};
use decode_attn::{DecodeAttention, DecodeShape, VariantSpec, Dtype, Family, FamilyChoice, KvFormat, PlanOptions, SplitPolicy};

use crate::common::{err, random_tree, Problem, TreeBufs};
use crate::paged::{self, Mode, Paging};

#[derive(Clone, Debug)]
pub struct TreeCase {
    pub name: String,
    pub family: Family,
    pub shape: DecodeShape,
    pub seq_lens: Vec<u32>,
    pub split: SplitPolicy,
    pub mode: Mode,
    pub paging: Option<Paging>,
    /// Run a chain and compare with the same shape without a tree, bit
    /// for bit, instead of a random tree against the reference.
    pub chain: bool,
}

#[derive(Clone, Copy)]
struct Variant {
    tag: &'static str,
    window: Option<u32>,
    sinks: bool,
    soft_cap: Option<f32>,
}

/// The cases, each run in every kernel family that serves it. `small`:
/// the sanitizer's sizes.
pub fn cases(small: bool) -> Vec<TreeCase> {
    shapes(small)
        .into_iter()
        .flat_map(|c| {
            let (format, d) = (c.shape.kv_format, c.shape.head_dim);
            Family::ALL.into_iter().filter(move |f| f.serves(format, d)).map(move |family| TreeCase { name: format!("{}/{}", c.name, family.name()), family, ..c.clone() })
        })
        .collect()
}

fn shapes(small: bool) -> Vec<TreeCase> {
    use decode_attn::PageOrder::{HeadMajor, TokenMajor};
    let variants = [
        Variant { tag: "tree", window: None, sinks: false, soft_cap: None },
        Variant { tag: "tree-window-sinks", window: Some(40), sinks: true, soft_cap: None },
        Variant { tag: "tree-softcap", window: None, sinks: false, soft_cap: Some(20.0) },
        Variant { tag: "tree-softcap-window7", window: Some(7), sinks: false, soft_cap: Some(20.0) },
    ];
    let mut out = Vec::new();
    for (fi, format) in KvFormat::ALL.into_iter().filter(|f| !f.latent_only()).enumerate() {
        let dtype = format.required_dtype().unwrap_or(if format == KvFormat::Int8 { Dtype::F16 } else { Dtype::Bf16 });
        let stage = decode_attn::plan::stage_keys(format, 128);
        for (vi, v) in variants.iter().enumerate() {
            // Every format runs the plain tree; the other variants rotate
            // over the formats (each in several).
            if vi > 0 && (vi + fi) % 2 != 0 {
                continue;
            }
            let shape = |batch: u32, hq: u32, hkv: u32, d: u32, q_len: u32, cap: u32| DecodeShape { variant: VariantSpec { window: v.window, sinks: v.sinks, soft_cap: v.soft_cap, tree: true, ..VariantSpec::STANDARD }, kv_format: format, dtype, ..DecodeShape::bf16(batch, hq, hkv, d, q_len, cap) };
            let mut add = |name: &str, s: DecodeShape, lens: Vec<u32>, split: SplitPolicy, mode: Mode, paging: Option<Paging>| {
                let name = format!("{}/{}/{}-{name}/hq{}-hkv{}/d{}/q{}/{split:?}/{mode:?}", format.name(), dtype.name(), v.tag, s.num_q_heads, s.num_kv_heads, s.head_dim, s.q_len);
                out.push(TreeCase { name, family: Family::Wide, shape: s, seq_lens: lens, split, mode, paging, chain: false });
            };
            if small {
                add("gqa-split", shape(3, 8, 2, 128, 4, 2 * stage + 1), vec![2 * stage + 1, stage - 1, 40], SplitPolicy::ChunkKeys(stage), Mode::Host, None);
                add("paged16-capacity", shape(2, 8, 2, 128, 5, 2 * stage + 16), vec![2 * stage + 5, 19], SplitPolicy::ChunkKeys(stage), Mode::Capacity, Some(Paging::packed(16, TokenMajor)));
                continue;
            }
            add("gqa-split", shape(4, 8, 2, 128, 3, 2100), vec![2100, 700, 40, 3], SplitPolicy::ChunkKeys(512), Mode::Host, None);
            add("mha-q8-unsplit", shape(3, 4, 4, 128, 8, 700), vec![700, 8, 300], SplitPolicy::Never, Mode::Host, None);
            add("mqa-48rows", shape(2, 16, 1, 128, 3, 5000), vec![4099, 1000], SplitPolicy::Auto, Mode::Host, None);
            add("gqa-q2-capacity-split", shape(4, 8, 2, 128, 2, 2100), vec![2100, 700, 40, 2], SplitPolicy::ChunkKeys(512), Mode::Capacity, None);
            for d in [64u32, 256].into_iter().filter(|&d| format.supports_head_dim(d)) {
                let stage = decode_attn::plan::stage_keys(format, d);
                add("gqa-chunk-edges", shape(4, 8, 2, d, 6, 4 * stage), vec![stage - 1, stage, stage + 6, 3 * stage + 5], SplitPolicy::ChunkKeys(stage), Mode::Host, None);
            }
            add("paged16-host", shape(4, 8, 2, 128, 5, 3 * stage + 16), vec![3 * stage + 5, 17, 19, 2 * stage], SplitPolicy::ChunkKeys(stage), Mode::Host, Some(Paging::packed(16, TokenMajor)));
            add("paged256-q8-capacity", shape(2, 8, 2, 128, 8, 1024), vec![1000, 300], SplitPolicy::ChunkKeys(256), Mode::Capacity, Some(Paging::new(256, HeadMajor)));
        }
        // The chain: bit for bit the step without a tree (sinks keep both
        // on the masked kernels), host and capacity plans.
        if !small && matches!(format, KvFormat::Bf16 | KvFormat::Int8 | KvFormat::Fp8PerHead | KvFormat::Int4G32) {
            for (mode, paging) in [(Mode::Host, None), (Mode::Capacity, Some(Paging::new(16, TokenMajor)))] {
                let s = DecodeShape { variant: VariantSpec { sinks: true, tree: true, ..VariantSpec::STANDARD }, kv_format: format, dtype, ..DecodeShape::bf16(3, 8, 2, 128, 5, 1200) };
                let name = format!("{}/{}/tree-chain-is-causal/hq8-hkv2/d128/q5/{mode:?}", format.name(), dtype.name());
                out.push(TreeCase { name, family: Family::Wide, shape: s, seq_lens: vec![1200, 517, 5], split: SplitPolicy::ChunkKeys(256), mode, paging, chain: true });
            }
        }
    }
    out
}


/// Runs a case twice on NaN-poisoned outputs: its error against the
/// reference (a chain case: 0 when the chain's output equals the causal
/// step's bit for bit), and the plan's most splits.
pub fn run(attn: &DecodeAttention, stream: &Stream, case: &TreeCase, seed: u64) -> Result<(f64, u32), String> {
    let s = &case.shape;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (q, mut k, v) = problem_inputs(s, &case.seq_lens, Distribution::Normal, seed, threads).map_err(err)?;
    // The new tokens' K rows: large.
    let st = s.kv_strides();
    for (b, &len) in case.seq_lens.iter().enumerate() {
        for t in (len - s.q_len) as u64..len as u64 {
            for h in 0..s.num_kv_heads as u64 {
                let at = (b as u64 * st.batch + t * st.token + h * st.head) as usize;
                k[at..at + s.head_dim as usize].iter_mut().for_each(|x| *x *= 16.0);
            }
        }
    }
    let mut p = Problem::from_inputs(s, &case.seq_lens, q, k, v).map_err(err)?;
    let (masks, positions) = if case.chain { chain_tree(s.q_len, &case.seq_lens) } else { random_tree(s.q_len, &case.seq_lens, seed) };
    p.heads.tree = Some(TreeBufs::new(masks, positions).map_err(err)?);
    let opts = PlanOptions { split: case.split, family: FamilyChoice::Force(case.family), ..Default::default() };
    let pool = case.paging.map(|paging| paged::Pool::new(&p, paging, seed)).transpose()?;
    let cache = pool.as_ref().map_or_else(|| p.own_cache(), |pool| pool.cache());
    let table = pool.as_ref().map(|pool| &pool.table[..]);
    let runs = |p: &mut Problem, shape: &DecodeShape| {
        let plan_shape = pool.as_ref().map_or_else(|| shape.clone(), |pool| DecodeShape { variant: VariantSpec { tree: shape.variant.tree, ..pool.shape.variant }, ..pool.shape.clone() });
        paged::run_planned(attn, stream, p, case.mode, &plan_shape, &case.seq_lens, table, None, &opts, &cache)
    };
    let (outs, splits) = runs(&mut p, s)?;
    let reference = p.reference(None).map_err(err)?;
    let error = crate::check_outputs(&outs, &reference)?;
    if !case.chain {
        return Ok((error, splits));
    }
    // The same step without a tree: the same kernel (sinks), causal.
    p.heads.tree = None;
    let (causal, _) = runs(&mut p, &DecodeShape { variant: VariantSpec { tree: false, ..s.variant }, ..s.clone() })?;
    match outs[0].iter().zip(&causal[0]).position(|(a, b)| a.to_bits() != b.to_bits()) {
        None => Ok((error, splits)),
        Some(at) => Err(format!("the chain's output differs from the causal step's at element {at}: {} vs {}", outs[0][at], causal[0][at])),
    }
}

/// Token i of every sequence sees tokens 0..=i, at its causal position.
fn chain_tree(q_len: u32, seq_lens: &[u32]) -> (Vec<u8>, Vec<u32>) {
    let masks = seq_lens.iter().flat_map(|_| (0..q_len).map(|i| ((1u16 << (i + 1)) - 1) as u8)).collect();
    let positions = seq_lens.iter().flat_map(|&l| (0..q_len).map(move |i| l - q_len + i)).collect();
    (masks, positions)
}
