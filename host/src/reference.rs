//! The f64 CPU reference, with exactly the kernel's semantics (causal among
//! the q_len new tokens, ragged lengths, GQA head mapping, KV strides).

use crate::shape::DecodeShape;

/// Attention output `[batch, q_len, num_q_heads, head_dim]` in f64.
///
/// `q` is `[batch, q_len, num_q_heads, head_dim]`; `k` and `v` are addressed
/// with `shape.kv_strides()` (in elements) and hold the values the kernel
/// sees (dequantized, if the cache is quantized).
pub fn decode_attention(shape: &DecodeShape, seq_lens: &[u32], q: &[f32], k: &[f32], v: &[f32]) -> Vec<f64> {
    let batches: Vec<usize> = (0..shape.batch as usize).collect();
    decode_attention_batches(shape, seq_lens, q, k, v, &batches)
}

/// As [`decode_attention`], for the listed sequences only; rows of other
/// sequences are NaN (for sampled checks of large shapes).
pub fn decode_attention_batches(shape: &DecodeShape, seq_lens: &[u32], q: &[f32], k: &[f32], v: &[f32], batches: &[usize]) -> Vec<f64> {
    let d = shape.head_dim as usize;
    let hq = shape.num_q_heads as usize;
    let ql = shape.q_len as usize;
    let g = shape.group_size() as usize;
    let st = shape.kv_strides();
    let scale = shape.softmax_scale() as f64;
    let mut out = vec![f64::NAN; shape.q_elems() as usize];
    let mut logits = Vec::new();
    for &b in batches {
        let len = seq_lens[b] as usize;
        for i in 0..ql {
            let visible = len - ql + 1 + i;
            for h in 0..hq {
                let kvh = h / g;
                let qrow = &q[((b * ql + i) * hq + h) * d..][..d];
                let row_at = |t: usize| (b as u64 * st.batch + t as u64 * st.token + kvh as u64 * st.head) as usize;
                logits.clear();
                logits.extend((0..visible).map(|t| {
                    let krow = &k[row_at(t)..][..d];
                    scale * qrow.iter().zip(krow).map(|(&a, &b)| a as f64 * b as f64).sum::<f64>()
                }));
                let max = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let mut denom = 0.0;
                let orow = &mut out[((b * ql + i) * hq + h) * d..][..d];
                orow.fill(0.0);
                for (t, &s) in logits.iter().enumerate() {
                    let p = (s - max).exp();
                    denom += p;
                    for (o, &x) in orow.iter_mut().zip(&v[row_at(t)..][..d]) {
                        *o += p * x as f64;
                    }
                }
                orow.iter_mut().for_each(|o| *o /= denom);
            }
        }
    }
    out
}

/// ‖out − ref‖₂ / ‖ref‖₂ over the elements where `reference` is not NaN,
/// and whether `out` has a NaN or infinity at any of them.
pub fn relative_l2_error(out: &[f32], reference: &[f64]) -> (f64, bool) {
    let (mut num, mut den, mut bad) = (0.0, 0.0, false);
    for (&o, &r) in out.iter().zip(reference) {
        if r.is_nan() {
            continue;
        }
        bad |= !o.is_finite();
        num += (o as f64 - r).powi(2);
        den += r * r;
    }
    ((num / den.max(f64::MIN_POSITIVE)).sqrt(), bad)
}
