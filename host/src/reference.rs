//! The f64 CPU reference, with exactly the kernel's semantics (causal among
//! the q_len new tokens, ragged lengths, GQA head mapping, KV strides, and
//! the variants: logits soft-cap, sliding window, sinks, ALiBi —
//! `docs/benchmark.md`, "The operation"), and MLA's latent attention
//! (`latent_attention`: V the first values of K's rows).
//! Public and validated like the GPU path: bad input is an `Err`, never a
//! panic or a silently truncated comparison.

use decode_attn_abi::{HeadDims, MAX_Q_LEN};

use crate::error::{ensure, Error, Result};
use crate::shape::DecodeShape;

/// Attention output `[batch, q_len, num_q_heads, head_dim]` in f64.
///
/// `q` is `[batch, q_len, num_q_heads, head_dim]`; `k` and `v` are addressed
/// with `shape.kv_strides()` (in elements) and hold the values the kernel
/// sees (dequantized, if the cache is quantized).
pub fn decode_attention(shape: &DecodeShape, seq_lens: &[u32], q: &[f32], k: &[f32], v: &[f32]) -> Result<Vec<f64>> {
    let batches: Vec<usize> = (0..shape.batch as usize).collect();
    decode_attention_batches(shape, seq_lens, q, k, v, &batches)
}

/// As [`decode_attention`], for the listed sequences only; rows of other
/// sequences are NaN (for sampled checks of large shapes).
pub fn decode_attention_batches(shape: &DecodeShape, seq_lens: &[u32], q: &[f32], k: &[f32], v: &[f32], batches: &[usize]) -> Result<Vec<f64>> {
    decode_attention_threads(shape, seq_lens, q, k, v, batches, 1)
}

/// As [`decode_attention_batches`], on up to `threads` CPU threads (the
/// sequences are divided among them; the result does not depend on it).
pub fn decode_attention_threads(
    shape: &DecodeShape,
    seq_lens: &[u32],
    q: &[f32],
    k: &[f32],
    v: &[f32],
    batches: &[usize],
    threads: usize,
) -> Result<Vec<f64>> {
    decode_attention_with(shape, seq_lens, q, k, v, &HeadInputs::default(), batches, threads)
}

/// The run-time inputs of a shape's variant, on the host: sink logits
/// (`VariantSpec::sinks`) and ALiBi slopes (`VariantSpec::alibi`), one
/// per query head each, and the sequences' first keys
/// (`VariantSpec::key_ranges`), one per sequence.
#[derive(Clone, Copy, Debug, Default)]
pub struct HeadInputs<'a> {
    pub sinks: Option<&'a [f32]>,
    pub alibi_slopes: Option<&'a [f32]>,
    /// Sequence b sees keys from `seq_starts[b]` on (read, as the kernels
    /// read device starts, as at most `seq_lens[b] − q_len`).
    pub seq_starts: Option<&'a [u32]>,
    /// A speculative-decoding draft tree over each sequence's new tokens
    /// (`docs/design/open-variants.md`, "The tree mask"); `None`: the new
    /// tokens are a chain (causal among themselves).
    pub tree: Option<TreeInputs<'a>>,
}

/// A draft tree per sequence, on the host: new token `i` of sequence `b`
/// sees the cached prefix (the first `len − q_len` keys) and the new
/// tokens its mask names (its ancestors and itself), and sits at its own
/// position, which the window and ALiBi measure from. A chain (mask of
/// token `i`: bits `0..=i`; position `len − q_len + i`) is the causal step.
#[derive(Clone, Copy, Debug)]
pub struct TreeInputs<'a> {
    /// `[batch, q_len]`: bit `j` of entry `(b, i)` set when new token `i`
    /// sees new token `j`; bit `i` must be set (a token sees itself).
    pub masks: &'a [u8],
    /// `[batch, q_len]`: each new token's position, the prefix length plus
    /// its depth in the tree (`len − q_len ≤ position < len`).
    pub positions: &'a [u32],
}

/// As [`decode_attention_threads`], with the variant's per-head inputs
/// (required exactly when the shape has sinks or ALiBi).
#[allow(clippy::too_many_arguments)]
pub fn decode_attention_with(
    shape: &DecodeShape,
    seq_lens: &[u32],
    q: &[f32],
    k: &[f32],
    v: &[f32],
    heads: &HeadInputs,
    batches: &[usize],
    threads: usize,
) -> Result<Vec<f64>> {
    check_inputs(shape, seq_lens, q, k, v, batches)?;
    for (name, wanted, given) in [("sinks", shape.variant.sinks, heads.sinks), ("alibi_slopes", shape.variant.alibi, heads.alibi_slopes)] {
        match (wanted, given) {
            (true, Some(x)) => ensure(x.len() >= shape.num_q_heads as usize, name, format!("{} values (one per query head)", shape.num_q_heads), x.len())?,
            (true, None) => return Err(Error::invalid(name, "one value per query head (the shape has them)", "none")),
            (false, Some(_)) => return Err(Error::invalid(name, "none (the shape has none)", "values")),
            (false, None) => {}
        }
    }
    // A sink is a logit: ±inf are its limits (+inf takes every weight, the
    // row's output is 0, as the kernels' `1 / (1 + 2^(s − lse))` gives), NaN
    // is no value. A slope multiplies key distances: only finite ones.
    if let Some(sinks) = heads.sinks {
        if let Some(h) = sinks.iter().take(shape.num_q_heads as usize).position(|x| x.is_nan()) {
            return Err(Error::invalid(format!("sinks[{h}]"), "a logit (a number, or ±inf)", "NaN"));
        }
    }
    if let Some(slopes) = heads.alibi_slopes {
        if let Some(h) = slopes.iter().take(shape.num_q_heads as usize).position(|x| !x.is_finite()) {
            return Err(Error::invalid(format!("alibi_slopes[{h}]"), "a finite slope", slopes[h]));
        }
    }
    match (shape.variant.key_ranges, heads.seq_starts) {
        (true, Some(s)) => ensure(s.len() >= shape.batch as usize, "seq_starts", format!("{} values (one per sequence)", shape.batch), s.len())?,
        (true, None) => return Err(Error::invalid("seq_starts", "one first key per sequence (the shape has key_ranges)", "none")),
        (false, Some(_)) => return Err(Error::invalid("seq_starts", "none (the shape has key_ranges = false)", "values")),
        (false, None) => {}
    }
    if let Some(tree) = heads.tree {
        check_tree(shape, seq_lens, &tree)?;
    }
    let d = shape.head_dim as usize;
    let rows_per_seq = shape.q_len as usize * shape.num_q_heads as usize;
    let mut out = vec![f64::NAN; shape.q_elems() as usize];
    // Each output row (sequence, token, head) is its own D-long slice: hand
    // them out to the threads, balanced by the keys each row visits.
    let mut rows: Vec<Option<&mut [f64]>> = out.chunks_mut(d).map(Some).collect();
    let mut jobs: Vec<(usize, usize, usize, &mut [f64])> = Vec::new();
    for &b in batches {
        for r in 0..rows_per_seq {
            if let Some(slice) = rows[b * rows_per_seq + r].take() {
                jobs.push((b, r / shape.num_q_heads as usize, r % shape.num_q_heads as usize, slice));
            }
        }
    }
    on_threads(&mut jobs, threads, |j| seq_lens[j.0] as u64, |(b, i, h, out), logits| row(shape, heads, seq_lens[*b] as usize, *b, *i, *h, q, k, v, logits, out));
    // A computed row that is not finite is a failure of the inputs (a NaN
    // in Q, K or V, a sum past f64), never a row to skip.
    let row_elems = rows_per_seq * d;
    for &b in batches {
        if let Some(at) = out[b * row_elems..][..row_elems].iter().position(|x| !x.is_finite()) {
            let r = at / d;
            let (i, h) = (r / shape.num_q_heads as usize, r % shape.num_q_heads as usize);
            return Err(Error::invalid(
                format!("reference row (sequence {b}, new token {i}, query head {h})"),
                "finite attention (finite Q, K and V rows)",
                out[b * row_elems + at],
            ));
        }
    }
    Ok(out)
}

fn check_inputs(shape: &DecodeShape, seq_lens: &[u32], q: &[f32], k: &[f32], v: &[f32], batches: &[usize]) -> Result<()> {
    shape.validate()?;
    // A pool's rows are found through a block table the reference does not
    // take: read with the layout's strides, sequence b would be page b.
    ensure(!shape.is_paged(), "kv_layout", "a contiguous or strided layout (gather a paged pool's pages first)", "a paged layout")?;
    shape.validate_seq_lens(seq_lens)?;
    let q_elems = shape.q_elems();
    ensure(q.len() as u64 == q_elems, "q", format!("{q_elems} values"), q.len())?;
    let kv = shape.kv_elems_required().unwrap_or(u64::MAX);
    ensure(k.len() as u64 >= kv, "k", format!("at least {kv} values"), k.len())?;
    ensure(v.len() as u64 >= kv, "v", format!("at least {kv} values"), v.len())?;
    if let Some(&b) = batches.iter().find(|&&b| b >= shape.batch as usize) {
        return Err(Error::invalid("batches", format!("sequence indices below {}", shape.batch), b));
    }
    Ok(())
}

/// A tree's masks and positions: one per new token of every sequence, each
/// token seeing itself and no later token (a token comes after its
/// ancestors), each position the prefix length plus a depth of at most the
/// token's index (what the kernels read them as, `VariantSpec::tree`).
fn check_tree(shape: &DecodeShape, seq_lens: &[u32], tree: &TreeInputs) -> Result<()> {
    let (batch, ql) = (shape.batch as usize, shape.q_len as usize);
    for (name, len) in [("tree_masks", tree.masks.len()), ("tree_positions", tree.positions.len())] {
        ensure(len >= batch * ql, name, format!("{} values ([batch, q_len])", batch * ql), len)?;
    }
    for b in 0..batch {
        let prefix = seq_lens[b] - shape.q_len;
        for i in 0..ql {
            let at = b * ql + i;
            ensure(tree.masks[at] & (1 << i) != 0, format!("tree_masks[{at}]"), format!("bit {i} set (new token {i} sees itself)"), format!("{:#010b}", tree.masks[at]))?;
            ensure(tree.masks[at] >> i <= 1, format!("tree_masks[{at}]"), format!("no bit above {i} (a token comes after its ancestors)"), format!("{:#010b}", tree.masks[at]))?;
            let pos = tree.positions[at];
            ensure((prefix..=prefix + i as u32).contains(&pos), format!("tree_positions[{at}]"), format!("a position in {prefix}..={} (the prefix length plus a depth of at most {i})", prefix + i as u32), pos)?;
        }
    }
    Ok(())
}

/// Output row (sequence `b` of length `len`, new token `i`, query head `h`):
/// the query at position `p = len − q_len + i` sees keys `t ≤ p` (and, with
/// a window `W`, `t ≥ p − W`; with key ranges, `t ≥ min(start_b, len −
/// q_len)`); logit `scale · q·k`, soft-capped
/// (`c · tanh(x / c)`) or plus ALiBi's `slope_h · (t − p)`; a sink adds
/// `exp(s_h − m)` to the denominator. With a draft tree, `p` is the
/// token's position and the new tokens it sees are those its mask names,
/// each at its own position (the window and ALiBi measure from those);
/// keys in order, so that a chain gives the causal row bit for bit.
#[allow(clippy::too_many_arguments)]
fn row(shape: &DecodeShape, heads: &HeadInputs, len: usize, b: usize, i: usize, h: usize, q: &[f32], k: &[f32], v: &[f32], logits: &mut Vec<f64>, out: &mut [f64]) {
    let d = shape.head_dim as usize;
    let hq = shape.num_q_heads as usize;
    let ql = shape.q_len as usize;
    let kvh = h / shape.group_size() as usize;
    let st = shape.kv_strides();
    let scale = shape.softmax_scale() as f64;
    let prefix = len - ql;
    // The keys the row sees, each with its position: the prefix's from the
    // first the window and key range leave, then the new tokens it sees.
    let (pos, sees): (usize, Box<dyn Fn(usize) -> bool>) = match heads.tree {
        None => (prefix + i, Box::new(move |j| j <= i)),
        Some(tree) => {
            let mask = tree.masks[b * ql + i];
            (tree.positions[b * ql + i] as usize, Box::new(move |j| mask & (1 << j) != 0))
        }
    };
    let key_pos = |t: usize| match heads.tree {
        Some(tree) if t >= prefix => tree.positions[b * ql + t - prefix] as usize,
        _ => t,
    };
    let own = heads.seq_starts.map_or(0, |s| (s[b] as usize).min(prefix));
    let first = shape.variant.window.map_or(0, |w| pos.saturating_sub(w as usize)).max(own);
    let keys: Vec<usize> = (first.min(prefix)..prefix).chain((0..ql).filter(|&j| sees(j)).map(|j| prefix + j).filter(|&t| key_pos(t) >= first)).collect();
    let slope = heads.alibi_slopes.map_or(0.0, |s| s[h] as f64);
    let qrow = &q[((b * ql + i) * hq + h) * d..][..d];
    let row_at = |t: usize| (b as u64 * st.batch + t as u64 * st.token + kvh as u64 * st.head) as usize;
    logits.clear();
    logits.extend(keys.iter().map(|&t| {
        let krow = &k[row_at(t)..][..d];
        let x = scale * qrow.iter().zip(krow).map(|(&a, &b)| a as f64 * b as f64).sum::<f64>();
        let x = match shape.variant.soft_cap {
            Some(cap) => cap as f64 * (x / cap as f64).tanh(),
            None => x,
        };
        x + slope * (key_pos(t) as f64 - pos as f64)
    }));
    let sink = heads.sinks.map(|s| s[h] as f64);
    if sink == Some(f64::INFINITY) {
        out.fill(0.0);
        return;
    }
    let max = logits.iter().copied().chain(sink).fold(f64::NEG_INFINITY, f64::max);
    let mut denom = sink.map_or(0.0, |s| (s - max).exp());
    out.fill(0.0);
    for (&t, &s) in keys.iter().zip(logits.iter()) {
        let p = (s - max).exp();
        denom += p;
        for (o, &x) in out.iter_mut().zip(&v[row_at(t)..][..d]) {
            *o += p * x as f64;
        }
    }
    out.iter_mut().for_each(|o| *o /= denom);
}

/// A multi-head latent attention problem in its absorbed form (DeepSeek V3,
/// Kimi K2; `docs/design/mla.md`): one latent head whose cached rows hold
/// `dims.qk` values (576: 512 latent + 64 RoPE), read as K whole and as V
/// by their first `dims.v` values (512), shared by every query head.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LatentShape {
    pub batch: u32,
    pub num_q_heads: u32,
    /// New query tokens per sequence, causal among themselves.
    pub q_len: u32,
    /// Rows per sequence in the cache.
    pub max_seq_len: u32,
    pub dims: HeadDims,
    /// The softmax scale (DeepSeek: `1/√192`, not `1/√576`).
    pub scale: f32,
}

impl LatentShape {
    fn check(&self, seq_lens: &[u32], q: &[f32], rows: &[f32]) -> Result<()> {
        ensure(self.batch >= 1, "batch", "at least 1", self.batch)?;
        ensure(self.num_q_heads >= 1, "num_q_heads", "at least 1", self.num_q_heads)?;
        ensure((1..=MAX_Q_LEN).contains(&self.q_len), "q_len", format!("1..={MAX_Q_LEN}"), self.q_len)?;
        ensure(self.dims.v >= 1 && self.dims.v <= self.dims.qk, "dims.v", format!("1..={} (V is the first values of each row)", self.dims.qk), self.dims.v)?;
        ensure(self.scale.is_finite() && self.scale > 0.0, "scale", "a positive finite number", self.scale)?;
        ensure(seq_lens.len() == self.batch as usize, "seq_lens", format!("{} lengths (one per sequence)", self.batch), seq_lens.len())?;
        if let Some(b) = seq_lens.iter().position(|&l| l < self.q_len || l > self.max_seq_len) {
            return Err(Error::invalid(format!("seq_lens[{b}]"), format!("q_len..=max_seq_len ({}..={})", self.q_len, self.max_seq_len), seq_lens[b]));
        }
        let q_elems = self.batch as u64 * self.q_len as u64 * self.num_q_heads as u64 * self.dims.qk as u64;
        ensure(q.len() as u64 == q_elems, "q", format!("{q_elems} values ([batch, q_len, num_q_heads, dims.qk])"), q.len())?;
        let row_elems = self.batch as u64 * self.max_seq_len as u64 * self.dims.qk as u64;
        ensure(rows.len() as u64 == row_elems, "rows", format!("{row_elems} values ([batch, max_seq_len, dims.qk])"), rows.len())
    }
}

/// Latent attention in f64: `out[b, i, h] = Σ_t softmax_t(scale · q[b, i,
/// h]·row[b, t]) · row[b, t][..dims.v]` over the keys `t ≤ len_b − q_len +
/// i`; `q` is `[batch, q_len, num_q_heads, dims.qk]`, `rows` `[batch,
/// max_seq_len, dims.qk]`, the result `[batch, q_len, num_q_heads,
/// dims.v]`. Bad shapes, lengths or buffer sizes are an `Err` naming them;
/// a row that is not finite (a NaN in the inputs) too.
pub fn latent_attention(shape: &LatentShape, seq_lens: &[u32], q: &[f32], rows: &[f32]) -> Result<Vec<f64>> {
    shape.check(seq_lens, q, rows)?;
    let (dq, dv) = (shape.dims.qk as usize, shape.dims.v as usize);
    let (hq, ql, cap) = (shape.num_q_heads as usize, shape.q_len as usize, shape.max_seq_len as usize);
    let scale = shape.scale as f64;
    let mut out = vec![f64::NAN; shape.batch as usize * ql * hq * dv];
    // Each output row (sequence, token, head) is its own slice: to the
    // CPU's threads, balanced by the keys each row visits.
    let mut jobs: Vec<(usize, usize, usize, &mut [f64])> = out.chunks_mut(dv).enumerate().map(|(at, o)| (at / (ql * hq), at / hq % ql, at % hq, o)).collect();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    on_threads(&mut jobs, threads, |j| seq_lens[j.0] as u64, |(b, i, h, o), logits| {
        let seq = &rows[*b * cap * dq..][..cap * dq];
        let keys = seq_lens[*b] as usize - ql + *i + 1;
        let qrow = &q[((*b * ql + *i) * hq + *h) * dq..][..dq];
        logits.clear();
        logits.extend(seq.chunks(dq).take(keys).map(|k| scale * qrow.iter().zip(k).map(|(&a, &x)| a as f64 * x as f64).sum::<f64>()));
        let max = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        o.fill(0.0);
        let mut denom = 0.0;
        for (row, &s) in seq.chunks(dq).zip(logits.iter()) {
            let p = (s - max).exp();
            denom += p;
            o.iter_mut().zip(&row[..dv]).for_each(|(o, &x)| *o += p * x as f64);
        }
        o.iter_mut().for_each(|o| *o /= denom);
    });
    if let Some(at) = out.iter().position(|x| !x.is_finite()) {
        let r = at / dv;
        let (b, i, h) = (r / (ql * hq), r / hq % ql, r % hq);
        return Err(Error::invalid(format!("reference row (sequence {b}, new token {i}, query head {h})"), "finite attention (finite Q and rows)", out[at]));
    }
    Ok(out)
}

/// Runs `work` on every job on up to `threads` scoped threads, the jobs
/// handed out in order, about an equal `cost` a thread; each thread's
/// `work` gets one scratch vector for its jobs.
fn on_threads<J: Send>(jobs: &mut [J], threads: usize, cost: impl Fn(&J) -> u64, work: impl Fn(&mut J, &mut Vec<f64>) + Sync) {
    let total: u64 = jobs.iter().map(&cost).sum();
    let per_thread = total.div_ceil(threads.max(1) as u64).max(1);
    std::thread::scope(|s| {
        let mut rest = jobs;
        while !rest.is_empty() {
            let (mut take, mut spent) = (0, 0u64);
            while take < rest.len() && spent < per_thread {
                spent += cost(&rest[take]);
                take += 1;
            }
            let (mine, tail) = rest.split_at_mut(take);
            rest = tail;
            let work = &work;
            s.spawn(move || {
                let mut scratch = Vec::new();
                mine.iter_mut().for_each(|j| work(j, &mut scratch));
            });
        }
    });
}

/// How far an output is from the reference.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Comparison {
    /// ‖out − ref‖₂ / ‖ref‖₂ over the compared elements.
    pub rel_l2: f64,
    /// Whether `out` has a NaN or infinity at a compared element.
    pub nonfinite: bool,
    /// Elements compared (all of them).
    pub compared: usize,
}

impl Comparison {
    /// Within `bound` and free of NaN/Inf.
    pub fn passes(&self, bound: f64) -> bool {
        !self.nonfinite && self.rel_l2 <= bound
    }
}

/// Compares `out` with `reference`, every element. Errors when the slices
/// differ in length, are empty, or when the reference holds a NaN or an
/// infinity: a sampled reference (`decode_attention_batches`) marks the
/// rows it did not compute NaN, so compare the computed rows' slices; a
/// NaN is never skipped, where it would pass a wrong kernel on those rows.
pub fn relative_l2_error(out: &[f32], reference: &[f64]) -> Result<Comparison> {
    ensure(out.len() == reference.len(), "out", format!("{} values, as many as the reference", reference.len()), out.len())?;
    let (mut num, mut den, mut nonfinite, mut compared) = (0.0, 0.0, false, 0usize);
    for (at, (&o, &r)) in out.iter().zip(reference).enumerate() {
        ensure(r.is_finite(), format!("reference[{at}]"), "finite values (compare only the rows a sampled reference computed)", r)?;
        compared += 1;
        nonfinite |= !o.is_finite();
        num += (o as f64 - r).powi(2);
        den += r * r;
    }
    ensure(compared > 0, "reference", "at least one value", "none")?;
    let rel_l2 = if den > 0.0 {
        (num / den).sqrt()
    } else if num == 0.0 {
        0.0
    } else {
        f64::INFINITY
    };
    Ok(Comparison { rel_l2: if nonfinite { f64::NAN } else { rel_l2 }, nonfinite, compared })
}
