//! Per-sequence key ranges `[start_b, L_b)` (`VariantSpec::key_ranges`):
//! every format, each kernel family that serves it, alone and with every
//! other variant, through plans of host lengths (`plan_key_ranges`) and
//! capacity plans (device starts in `StepInputs`), contiguous and paged.
//! The K rows before each sequence's start are 64 times larger than the
//! others, so a key that should be hidden and is not dominates its row.
//! Starts at 0, at `L − q_len` (only the new tokens and the last cached
//! key seen), off every 16-key and page edge, and (device starts) past
//! `L − q_len`, which the kernels read as `L − q_len`.

use decode_attn::cust::memory::DeviceBuffer;
use decode_attn::cust::stream::Stream;
use decode_attn::testing::{problem_inputs, Distribution};
use decode_attn::{DecodeAttention, DecodeShape, VariantSpec, Dtype, Family, FamilyChoice, KvFormat, PlanOptions, SplitPolicy};

use crate::common::{err, Problem};
use crate::paged::{self, Mode, Paging};

#[derive(Clone, Debug)]
pub struct RangeCase {
    pub name: String,
    pub family: Family,
    pub shape: DecodeShape,
    pub seq_lens: Vec<u32>,
    /// First keys; past `L − q_len` only in capacity cases (device values).
    pub starts: Vec<u32>,
    pub split: SplitPolicy,
    pub mode: Mode,
    pub paging: Option<Paging>,
}

#[derive(Clone, Copy)]
struct Variant {
    tag: &'static str,
    window: Option<u32>,
    sinks: bool,
    alibi: bool,
    soft_cap: Option<f32>,
}

/// The cases, each run in every kernel family that serves it (and, where
/// the wgmma family has both, warp-specialised and not). `small`: the
/// sanitizer's sizes.
pub fn cases(small: bool) -> Vec<RangeCase> {
    per_family(shapes(small))
}

fn per_family(cases: Vec<RangeCase>) -> Vec<RangeCase> {
    cases
        .into_iter()
        .flat_map(|c| {
            let (format, d) = (c.shape.kv_format, c.shape.head_dim);
            Family::ALL.into_iter().filter(move |f| f.serves(format, d)).map(move |family| RangeCase { name: format!("{}/{}", c.name, family.name()), family, ..c.clone() })
        })
        .collect()
}

fn shapes(small: bool) -> Vec<RangeCase> {
    use decode_attn::PageOrder::{HeadMajor, TokenMajor};
    let variants = [
        Variant { tag: "ranges", window: None, sinks: false, alibi: false, soft_cap: None },
        Variant { tag: "ranges-window", window: Some(40), sinks: false, alibi: false, soft_cap: None },
        Variant { tag: "ranges-window-sinks", window: Some(300), sinks: true, alibi: false, soft_cap: None },
        Variant { tag: "ranges-softcap", window: None, sinks: false, alibi: false, soft_cap: Some(20.0) },
        Variant { tag: "ranges-alibi", window: None, sinks: false, alibi: true, soft_cap: None },
    ];
    let mut out = Vec::new();
    for (fi, format) in KvFormat::ALL.into_iter().filter(|f| !f.latent_only()).enumerate() {
        let dtype = format.required_dtype().unwrap_or(if format == KvFormat::Int8 { Dtype::F16 } else { Dtype::Bf16 });
        let stage = decode_attn::plan::stage_keys(format, 128);
        for (vi, v) in variants.iter().enumerate() {
            // Every format runs the plain key ranges; the other variants
            // rotate over the formats (each variant in several formats).
            if vi > 0 && (vi + fi) % 3 != 0 {
                continue;
            }
            let shape = |batch: u32, hq: u32, hkv: u32, d: u32, q_len: u32, cap: u32| DecodeShape { variant: VariantSpec { window: v.window, sinks: v.sinks, alibi: v.alibi, soft_cap: v.soft_cap, key_ranges: true, ..VariantSpec::STANDARD }, kv_format: format, dtype, ..DecodeShape::bf16(batch, hq, hkv, d, q_len, cap) };
            let mut add = |name: &str, s: DecodeShape, lens: Vec<u32>, starts: Vec<u32>, split: SplitPolicy, mode: Mode, paging: Option<Paging>| {
                let name = format!("{}/{}/{}-{name}/hq{}-hkv{}/d{}/q{}/{split:?}/{mode:?}", format.name(), dtype.name(), v.tag, s.num_q_heads, s.num_kv_heads, s.head_dim, s.q_len);
                out.push(RangeCase { name, family: Family::Wide, shape: s, seq_lens: lens, starts, split, mode, paging });
            };
            if small {
                add("gqa-split", shape(3, 8, 2, 128, 3, 2 * stage + 1), vec![2 * stage + 1, stage - 1, 40], vec![37, 0, 37], SplitPolicy::ChunkKeys(stage), Mode::Host, None);
                add("gqa-capacity", shape(3, 8, 2, 128, 3, 2 * stage + 1), vec![2 * stage + 1, stage - 1, 40], vec![37, 0, 60], SplitPolicy::ChunkKeys(stage), Mode::Capacity, None);
                continue;
            }
            // Left padding of 0, 9, 17 and a start at the last cached key.
            add("gqa-split", shape(4, 8, 2, 128, 3, 2100), vec![2100, 700, 700, 90], vec![0, 9, 17, 87], SplitPolicy::ChunkKeys(512), Mode::Host, None);
            add("gqa-unsplit-q1", shape(4, 32, 8, 128, 1, 1000), vec![1000, 999, 500, 33], vec![17, 9, 0, 32], SplitPolicy::Never, Mode::Host, None);
            add("mqa-48rows", shape(2, 16, 1, 128, 3, 5000), vec![4099, 1000], vec![1031, 5], SplitPolicy::Auto, Mode::Host, None);
            add("mha-q8", shape(3, 4, 4, 128, 8, 700), vec![700, 8, 300], vec![133, 0, 292], SplitPolicy::Never, Mode::Host, None);
            for d in [64u32, 256].into_iter().filter(|&d| format.supports_head_dim(d)) {
                let stage = decode_attn::plan::stage_keys(format, d);
                add("gqa-chunk-edges", shape(4, 8, 2, d, 3, 4 * stage), vec![stage - 1, stage, stage + 1, 3 * stage + 5], vec![stage - 4, 1, stage - 2, stage + 3], SplitPolicy::ChunkKeys(stage), Mode::Host, None);
            }
            // Device starts: past L − q_len (read as L − q_len), and starts
            // that put a sequence's first chunk past its range's start.
            add("gqa-capacity-split", shape(4, 8, 2, 128, 3, 2100), vec![2100, 700, 40, 3], vec![1500, 9, 1000, 2], SplitPolicy::ChunkKeys(512), Mode::Capacity, None);
            add("gqa-capacity-unsplit", shape(3, 16, 2, 128, 1, 900), vec![900, 450, 1], vec![899, 451, 7], SplitPolicy::Never, Mode::Capacity, None);
            add("paged16-host", shape(4, 8, 2, 128, 3, 3 * stage + 16), vec![3 * stage + 5, 17, 19, 2 * stage], vec![21, 3, 16, stage + 7], SplitPolicy::ChunkKeys(stage), Mode::Host, Some(Paging::packed(16, TokenMajor)));
            add("paged256-capacity", shape(2, 8, 2, 128, 1, 1024), vec![1000, 300], vec![300, 999], SplitPolicy::ChunkKeys(256), Mode::Capacity, Some(Paging::new(256, HeadMajor)));
        }
    }
    out
}


/// Runs a case twice on NaN-poisoned outputs: its error against the
/// reference, and the plan's most splits.
pub fn run(attn: &DecodeAttention, stream: &Stream, case: &RangeCase, seed: u64) -> Result<(f64, u32), String> {
    let s = &case.shape;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (q, mut k, v) = problem_inputs(s, &case.seq_lens, Distribution::Normal, seed, threads).map_err(err)?;
    // The rows before each start: large keys.
    let st = s.kv_strides();
    for (b, (&len, &start)) in case.seq_lens.iter().zip(&case.starts).enumerate() {
        for t in 0..start.min(len.saturating_sub(s.q_len)) as u64 {
            for h in 0..s.num_kv_heads as u64 {
                let at = (b as u64 * st.batch + t * st.token + h * st.head) as usize;
                k[at..at + s.head_dim as usize].iter_mut().for_each(|x| *x *= 64.0);
            }
        }
    }
    let mut p = Problem::from_inputs(s, &case.seq_lens, q, k, v).map_err(err)?;
    p.heads.starts = Some((case.starts.clone(), DeviceBuffer::from_slice(&case.starts).map_err(err)?));
    let opts = PlanOptions { split: case.split, family: FamilyChoice::Force(case.family), ..Default::default() };
    let pool = case.paging.map(|paging| paged::Pool::new(&p, paging, seed)).transpose()?;
    let cache = pool.as_ref().map_or_else(|| p.own_cache(), |pool| pool.cache());
    let plan_shape = pool.as_ref().map_or(s, |pool| &pool.shape);
    let table = pool.as_ref().map(|pool| &pool.table[..]);
    let (outs, splits) = paged::run_planned(attn, stream, &mut p, case.mode, plan_shape, &case.seq_lens, table, Some(&case.starts), &opts, &cache)?;
    let reference = p.reference(None).map_err(err)?;
    crate::check_outputs(&outs, &reference).map(|e| (e, splits))
}
