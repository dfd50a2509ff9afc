//! The error bound whatever the magnitudes of V and K: every format, each
//! kernel family that serves it, V scaled by powers of ten from 1e-6 to
//! 1e3 (K normal), and K scaled over the same range (V normal). Outputs
//! bf16 across the whole range; fp16 outputs from V of 1e-1 on (below,
//! outputs fall under fp16's smallest normal, 2^-14, where the output's
//! own rounding is coarser than the bound). The reference computes on the
//! same dequantized K and V. And the soft-cap at its bound
//! (`decode_attn::shape::MAX_SOFT_CAP`), with logits in the hundreds.

use decode_attn::cust::stream::Stream;
use decode_attn::testing::{problem_inputs, Distribution};
use decode_attn::{DecodeAttention, DecodeShape, VariantSpec, Dtype, Family, FamilyChoice, KvFormat, PlanOptions, SplitPolicy, Workspace};

use crate::common::{err, Problem};

#[derive(Clone, Debug)]
pub struct MagnitudeCase {
    pub name: String,
    pub family: Family,
    pub shape: DecodeShape,
    pub seq_lens: Vec<u32>,
    /// Factors of K and V.
    pub k_scale: f32,
    pub v_scale: f32,
    pub split: SplitPolicy,
}

/// The dtypes a format's cases run in: its own, or both for the quantized
/// formats that take either.
fn dtypes(format: KvFormat) -> Vec<Dtype> {
    match format.required_dtype() {
        Some(d) => vec![d],
        None => Dtype::ALL.to_vec(),
    }
}

/// `small`: the sanitizer's few.
pub fn cases(small: bool) -> Vec<MagnitudeCase> {
    let mut out = Vec::new();
    for format in KvFormat::ALL.into_iter().filter(|f| !f.latent_only()) {
        for dtype in dtypes(format) {
            let v_exps: Vec<i32> = match (small, dtype) {
                (true, Dtype::Bf16) => vec![-6, 3],
                (true, Dtype::F16) => vec![-1, 3],
                (false, Dtype::Bf16) => (-6..=3).collect(),
                (false, Dtype::F16) => (-1..=3).collect(),
            };
            let k_exps: Vec<i32> = match (small, dtype) {
                (true, _) => vec![],
                (false, Dtype::Bf16) => vec![-6, -3, 2, 3],
                (false, Dtype::F16) => vec![-6, -3, 1],
            };
            let shapes = [
                // The case that failed: MHA, head dim 64.
                ("mha-d64", DecodeShape::bf16(2, 4, 4, 64, 1, 300), vec![300u32, 77], SplitPolicy::Never),
                ("gqa-d128-split", DecodeShape::bf16(2, 16, 2, 128, 2, 1000), vec![1000, 333], SplitPolicy::ChunkKeys(256)),
            ];
            for (tag, base, lens, split) in shapes {
                if !format.supports_head_dim(base.head_dim) {
                    continue;
                }
                let shape = DecodeShape { kv_format: format, dtype, ..base };
                let mut add = |what: String, k_scale: f32, v_scale: f32, shape: &DecodeShape| {
                    for family in Family::ALL.into_iter().filter(|f| f.serves(format, shape.head_dim)) {
                        let name = format!("{}/{}/magnitudes-{what}/{tag}/{}", format.name(), dtype.name(), family.name());
                        out.push(MagnitudeCase { name, family, shape: shape.clone(), seq_lens: lens.clone(), k_scale, v_scale, split });
                    }
                };
                for &e in &v_exps {
                    add(format!("v1e{e}"), 1.0, 10f32.powi(e), &shape);
                }
                for &e in &k_exps {
                    add(format!("k1e{e}"), 10f32.powi(e), 1.0, &shape);
                }
                if !small {
                    // The soft-cap at its bound, logits in the hundreds
                    // (scale 1, K ×1 and ×30).
                    let capped = DecodeShape { variant: VariantSpec { soft_cap: Some(decode_attn::shape::MAX_SOFT_CAP), ..shape.variant }, scale: Some(1.0), ..shape.clone() };
                    add("softcap-bound-k1".into(), 1.0, 1.0, &capped);
                    add("softcap-bound-k30".into(), 30.0, 1.0, &capped);
                }
            }
        }
    }
    out
}


/// Runs a case twice on NaN-poisoned outputs: its error against the
/// reference on the same dequantized K and V, and the plan's most splits.
pub fn run(attn: &DecodeAttention, stream: &Stream, case: &MagnitudeCase, seed: u64) -> Result<(f64, u32), String> {
    let s = &case.shape;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (q, mut k, mut v) = problem_inputs(s, &case.seq_lens, Distribution::Normal, seed, threads).map_err(err)?;
    k.iter_mut().for_each(|x| *x *= case.k_scale);
    v.iter_mut().for_each(|x| *x *= case.v_scale);
    let mut p = Problem::from_inputs(s, &case.seq_lens, q, k, v).map_err(err)?;
    let opts = PlanOptions { split: case.split, family: FamilyChoice::Force(case.family), ..Default::default() };
    let plan = attn.plan(s, &case.seq_lens, &opts).map_err(err)?;
    let mut ws = Workspace::for_plan(&plan).map_err(err)?;
    let cache = p.own_cache();
    let outs = p.run_twice(stream, |p| p.run_cache(attn, &plan, &cache, &mut ws, stream))?;
    let reference = p.reference(None).map_err(err)?;
    crate::check_outputs(&outs, &reference).map(|e| (e, plan.max_splits()))
}
