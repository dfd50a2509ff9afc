//! Online-softmax state algebra, in base 2. A state is `(m, l)` with `m` the
//! running max of the (base-2) logits and `l = Σ 2^(s - m)`; the output
//! accumulator is scaled alongside. Written once, used for the per-step
//! update, the merge across warps of a block and (in `merge.rs`) across splits.

use crate::arch::math::ex2;

/// The value to subtract from logits when the max is `m`. An empty state has
/// `m = -inf`; subtracting it would give `-inf - (-inf) = NaN`, so empty
/// states use 0 instead (every term is then `2^-inf = 0`).
#[inline(always)]
pub fn safe_max(m: f32) -> f32 {
    if m == f32::NEG_INFINITY {
        0.0
    } else {
        m
    }
}

/// Factor that rescales a state with max `m_old` to the new max `m_new`.
#[inline(always)]
pub fn rescale(m_old: f32, m_new: f32) -> f32 {
    ex2(m_old - safe_max(m_new))
}

/// `1 / l` and the base-2 log-sum-exp `m + log2(l)` of a finished state;
/// an empty state (`l == 0`: every key masked) gives `(0, -inf)`, so its
/// output is 0 and its weight in a merge is 0.
#[inline(always)]
pub fn finish(m: f32, l: f32) -> (f32, f32) {
    if l > 0.0 {
        (crate::arch::math::rcp(l), m + crate::arch::math::lg2(l))
    } else {
        (0.0, f32::NEG_INFINITY)
    }
}

/// Rescales a thread's `mma.m16n8` accumulator tiles (`c0, c1` in its
/// first row, `c2, c3` in its second) by the rows' factors `alpha`.
#[inline(always)]
pub fn rescale_rows<const N: usize>(o: &mut [[f32; 4]; N], alpha: [f32; 2]) {
    for acc in o.iter_mut() {
        acc[0] *= alpha[0];
        acc[1] *= alpha[0];
        acc[2] *= alpha[1];
        acc[3] *= alpha[1];
    }
}

/// Lazy rescaling: a warp moves its rows' running maxima only when some row's
/// new logits exceed its max by more than `slack` (base 2); otherwise every
/// max stays, the step's terms are `2^(s - m) ≤ 2^slack`, and the warp skips
/// rescaling its accumulator (`D / 2` or `D / 4` multiplies per step). The
/// state stays exact — `m`, `l` and the accumulator always share one max —
/// only the terms may exceed 1, so `slack` is what the format's P packing has
/// room for (0: move whenever a max grows, as a plain online softmax does).
#[inline(always)]
pub fn must_move(m: f32, step_max: f32, slack: f32) -> bool {
    // m = -inf (nothing seen yet): any finite logit moves it.
    step_max > m + slack
}

/// Whether the warp moves the maxima `m` of this thread's rows (and every
/// other lane's) to cover the step maxima `step_max`: with `slack`, when
/// any row of the warp must ([`must_move`]); without, always (a plain
/// online softmax, no vote).
#[inline(always)]
pub fn warp_must_move(m: [f32; 2], step_max: [f32; 2], slack: Option<f32>) -> bool {
    match slack {
        Some(slack) => crate::arch::warp::any(must_move(m[0], step_max[0], slack) || must_move(m[1], step_max[1], slack)),
        None => true,
    }
}

/// [`advance`] when the warp moves its maxima (`moved`, from
/// [`must_move`] voted over the warp); otherwise the max stays: factor 1.
#[inline(always)]
pub fn advance_if(m: &mut f32, step_max: f32, moved: bool) -> (f32, f32) {
    if moved {
        advance(m, step_max)
    } else {
        (1.0, safe_max(*m))
    }
}

/// One online-softmax step of a row: the running max `m` moves to cover the
/// new logits' max `step_max`. Returns the factor that rescales the old sum
/// and accumulator, and the value to subtract from the new logits.
#[inline(always)]
pub fn advance(m: &mut f32, step_max: f32) -> (f32, f32) {
    let new = m.max(step_max);
    let alpha = rescale(*m, new);
    *m = new;
    (alpha, safe_max(new))
}

/// The exponent a row's softmax base adds for a key whose P carries V's
/// per-row scale `s` (int8, fp8 per head, where P is packed to fp16 as
/// `P · s`): `⌊log2 s⌋ − 14`, clamped to `[−64, 113]`, as an f32.
///
/// Such formats take as a row's base `b` the running maximum of `x + e`
/// (logit plus the exponent of the largest V scale among the thread's
/// keys of the step) rather than of `x`: the 16-bit operand `2^(x − b) · s`
/// then stays below 2^15 (never fp16's 65504) and the step that sets `b`
/// puts its largest at 2^14 or more, whatever V's magnitude. With the
/// base at the plain maximum, V rows of magnitude 1e-4 put `P · s` among
/// fp16's subnormals and lost 2.6 % of the output (docs/perf.md, "V's
/// scale in the softmax base"). The sum `l = Σ 2^(x − b)` and the output
/// share the base, so `O / l` and the log-sum-exp `b + log2 l` are the
/// softmax's whatever `b` is; the clamp keeps `l` within f32 (at most
/// `2^64` a key).
#[inline(always)]
pub fn scale_exponent(s: f32) -> f32 {
    // The biased exponent into the low bits of 2^23: an exact integer.
    let biased = f32::from_bits(0x4B00_0000 | ((s.to_bits() >> 23) & 0xff)) - 8_388_608.0;
    (biased - (127.0 + 14.0)).clamp(-64.0, 113.0)
}
