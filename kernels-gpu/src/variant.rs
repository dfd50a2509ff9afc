//! Attention variants: the hooks of the softmax step, in the spirit of
//! FlashInfer's `variants.cuh`, as three orthogonal parts ([`Parts`]):
//! - a score modifier ([`ScoreModifier`]: the base-2 logit of a scaled
//!   score, which may depend on the key's distance to the row: ALiBi);
//! - a mask ([`MaskPart`]: which keys a row does not see beyond the causal
//!   limit: a sliding window's start, a sequence's first key, a draft
//!   tree's non-ancestors);
//! - sinks ([`SinksPart`]: the epilogue's [`AttentionVariant::sink_factor`];
//!   split rows get theirs in the merge, `crate::merge`).
//!
//! [`AttentionVariant`] derives every hook from the parts, as trait methods
//! with defaults: the query transform ([`AttentionVariant::score_scale`]:
//! the factor of the raw `q·k`; converted Q rows and int8 K rows multiply
//! their own factors in), a row's terms ([`AttentionVariant::row_terms`]),
//! the masked-step test ([`AttentionVariant::step_masked`]), the mask
//! ([`AttentionVariant::hides`], and a draft tree's [`TreeRow`]) and the
//! logit. The three bodies apply them through one helper, [`logits`].
//!
//! A variant is a type, monomorphised into its kernels (`Variant` in
//! `decode_attn_abi` names the compiled combinations, `VariantParts` their
//! parts), so the standard variant's hooks compile to exactly the
//! arithmetic the bodies had before they existed, and no part's values
//! cost registers they do not use: they are read from the launch's
//! parameters (`DecodeParams::score_scale`, `logit_cap`, `window`, `sinks`,
//! `alibi_slopes`, `tree_masks`). A part's absence at launch is a value
//! (`NO_WINDOW`, a null pointer), so that one kernel serves gpt-oss's
//! windowed and full layers, Gemma 2's local and global ones, and a
//! speculative step's tree or none.

use core::marker::PhantomData;

use decode_attn_abi::{DecodeParams, MaskKind, ScoreMod, Variant, VariantParts};

use crate::arch::math::{ex2, rcp};
use crate::arch::{memory, thread};

/// What the hooks know of one query row besides its causal limit: the first
/// key it sees (its window's, or its sequence's own first key), its
/// absolute position and its ALiBi slope (base 2). Zeros where the variant
/// has no use for them, which the compiler then never computes.
#[derive(Clone, Copy)]
pub struct RowTerms {
    /// Keys `< first` are outside the row's window or before its
    /// sequence's first key (`DecodeParams::seq_starts`).
    pub first: u32,
    /// The row's position `p = seq_len − q_len + token` (under a draft
    /// tree its causal one: its [`TreeRow`] has its tree position).
    pub pos: u32,
    /// ALiBi: the row's head's slope × log2(e).
    pub slope: f32,
}

/// A row's mask under a draft tree (`DecodeParams::tree_masks`), applied
/// in a second pass over a masked step's logits ([`tree_row`]): the first
/// key its tree position's window shows, and the new keys it does not see.
/// (Its own pass, after the row terms are dead: tested beside them in one
/// pass, the tree's terms spilled the wide kernels at their 168-register
/// cap by up to 128 bytes, docs/perf.md, "Draft trees".)
#[derive(Clone, Copy)]
pub struct TreeRow {
    /// Keys `< first` are outside the row's window or before its
    /// sequence's first key.
    pub first: u32,
    /// The step's first new key, `seq_len − q_len`.
    pub new0: u32,
    /// Bit `j` set when the row does not see new key `new0 + j` (not an
    /// ancestor in the tree, nor itself).
    pub hidden: u32,
}

impl TreeRow {
    /// Whether the tree hides `key` from the row: below its window's first
    /// key, or a new key it does not see (`j` past 31 for the prefix's).
    #[inline(always)]
    pub fn hides(&self, key: u32) -> bool {
        let j = key.wrapping_sub(self.new0);
        key < self.first || (j < 32 && (self.hidden >> j) & 1 != 0)
    }
}

/// The tree's mask of the row of `token` of sequence `batch` (`seq_len`
/// keys, its own first key `seq_first`): its ancestor bits and position
/// from the launch's arrays, the position read as at least the step's
/// first new key and at most the row's causal position (a tree's tokens
/// come after their ancestors: a depth is at most the token's index), so
/// that no device value moves a row's window outside the keys the plan's
/// work covers; its own bit read as set (no row is empty), the bits past
/// it as clear (the causal limit hides those keys).
///
/// # Safety
/// A launch with a tree ([`tree_applies`]): the host checked both arrays
/// to hold `batch × q_len` values (u8 masks, u32 positions).
#[inline(always)]
pub unsafe fn tree_row(p: &DecodeParams, seq_len: u32, seq_first: u32, batch: u32, token: u32) -> TreeRow {
    let new0 = seq_len.wrapping_sub(p.q_len);
    let at = (batch * p.q_len + token) as u64;
    let (mask, pos) = (memory::ld_global_nc_u8(p.tree_masks + at), memory::ld_global_nc_u32(p.tree_positions + 4 * at));
    let pos = pos.max(new0).min(new0.wrapping_add(token));
    TreeRow { first: pos.saturating_sub(p.window).max(seq_first), new0, hidden: !(mask | (1 << token)) }
}

/// The hooks a kernel body applies to every score (see the module docs),
/// derived from a variant's three parts; each is a method with a default,
/// which a variant type may override.
pub trait AttentionVariant {
    /// The logits transform.
    type Score: ScoreModifier;
    /// The keys hidden beyond the causal limit.
    type Mask: MaskPart;
    /// Whether the launch's sinks enter the softmax.
    const SINKS: bool;
    /// The compiled variant of these parts (`decode_attn_abi::Variant`:
    /// the kernel set's name for them, which sizes its tiles).
    const VARIANT: Variant = Variant::of(VariantParts { score: Self::Score::KIND, mask: Self::Mask::KIND, sinks: Self::SINKS });
    /// Whether the logits are the scaled score times a constant
    /// ([`Variant::linear_in_scale`]): only then may a kernel apply a row's
    /// positive factor to its maximum and in the exponent's FMA instead of
    /// to every score (the wgmma kernels' `fold`).
    const LINEAR_IN_SCALE: bool = matches!(Self::Score::KIND, ScoreMod::Plain);
    /// Whether the launch's window and first keys apply.
    const WINDOW: bool = Self::Mask::KIND as u32 >= MaskKind::Window as u32;
    /// Whether the logits carry ALiBi's bias (the row terms' slope).
    const ALIBI: bool = matches!(Self::Score::KIND, ScoreMod::Alibi);
    /// Whether the launch's draft tree applies ([`Variant::takes_tree`]).
    const TREE: bool = matches!(Self::Mask::KIND, MaskKind::Tree);
    /// Whether the kernels prefetch the launch's per-head arrays (slopes,
    /// sinks): every variant with a part (the standard kernels keep their
    /// code; windows come with sinks in every compiled variant).
    const PER_HEAD: bool = Self::ALIBI || Self::WINDOW || Self::SINKS;

    /// The query transform: what every raw score `q·k` of the launch is
    /// multiplied by before the logit.
    #[inline(always)]
    fn score_scale(p: &DecodeParams) -> f32 {
        p.score_scale
    }

    /// The terms of the row of `token` (of the step's new tokens) and query
    /// head `head` in a sequence of `seq_len` keys whose own first key is
    /// `seq_first` (`crate::decode::block::first_key`), for one step:
    /// computed afresh at each step (the row's token and head through
    /// [`thread::opaque`]), not held across the key loop, where they
    /// spilled the 128-register wgmma kernels (docs/perf.md, "Variant
    /// kernels"). An ALiBi slope is an L1 hit. The standard variant's are
    /// [`RowTerms::NONE`], computed from nothing (so its kernels' code is
    /// what it was before the terms existed).
    /// Under a draft tree the first key is measured with a window `q_len −
    /// 1` keys wider (`DecodeParams::row_window`): the least a tree
    /// position's first key can be; the tree's pass ([`tree_row`]) masks
    /// the keys the row's own position's window does not show.
    #[inline(always)]
    fn row_terms(p: &DecodeParams, seq_len: u32, seq_first: u32, token: u32, head: u32) -> RowTerms {
        if !Self::WINDOW && !Self::ALIBI {
            return RowTerms::NONE;
        }
        let pos = seq_len.wrapping_sub(p.q_len).wrapping_add(thread::opaque(token));
        let window = if Self::TREE { p.row_window } else { p.window };
        let first = if Self::WINDOW { pos.saturating_sub(window).max(seq_first) } else { 0 };
        let slope = if Self::ALIBI {
            // SAFETY: the host checked `alibi_slopes` to hold `num_q_heads`
            // f32s (a missing row's head is 0).
            let slope = unsafe { f32::from_bits(memory::ld_global_nc_u32(p.alibi_slopes + 4 * thread::opaque(head) as u64)) };
            slope * core::f32::consts::LOG2_E
        } else {
            0.0
        };
        RowTerms { first, pos, slope }
    }

    /// Keys below this may be outside the window of some row of a sequence
    /// of `seq_len` keys (its last new token's first key), or before the
    /// sequence's own first key `seq_first`; 0 for variants without a
    /// window (and for a launch without a window or first keys).
    #[inline(always)]
    fn window_from(p: &DecodeParams, seq_len: u32, seq_first: u32) -> u32 {
        if Self::WINDOW {
            (seq_len.wrapping_sub(1)).saturating_sub(p.window).max(seq_first)
        } else {
            0
        }
    }

    /// Whether a step over keys `key0 .. key0 + keys` must test its keys
    /// against the rows' masks: it reaches the first key a row's causal
    /// limit, a draft tree or the item's end hides (`mask_from`,
    /// `crate::decode::block::mask_from`), or (windows) starts below the
    /// last first key a row's window shows (`window_from`).
    #[inline(always)]
    fn step_masked(key0: u32, keys: u32, mask_from: u32, window_from: u32) -> bool {
        key0 + keys > mask_from || (Self::WINDOW && key0 < window_from)
    }

    /// The mask: whether a row whose keys end at `limit` (causal among the
    /// new tokens, and the work item's end) hides `key`.
    #[inline(always)]
    fn hides(_p: &DecodeParams, key: u32, limit: u32, row: &RowTerms) -> bool {
        key >= limit || (Self::WINDOW && key < row.first)
    }

    /// The logits transform: the base-2 logit of key `key`'s scaled score
    /// `x` for a row with terms `row`.
    #[inline(always)]
    fn logit(p: &DecodeParams, x: f32, key: u32, row: &RowTerms) -> f32 {
        Self::Score::logit(p, x, key, row)
    }

    /// Whether a step's logits take the draft tree's pass: kernels whose
    /// mask takes a tree, a launch with one, a step that tests keys.
    #[inline(always)]
    fn tree_applies(p: &DecodeParams, masked: bool) -> bool {
        Self::TREE && masked && p.tree_masks != 0
    }

    /// Starts the loads of the launch's per-head values (ALiBi slopes,
    /// sinks) at the kernel's start, a 128-byte line per thread of the
    /// first few, so that the first step's slopes and the epilogue's or
    /// merge's sinks hit L1: cold, they waited on HBM in every block
    /// (docs/perf.md, "Variant kernels"). Called before anything else is
    /// live (from the rows' heads, later, it moved ptxas to spills in the
    /// capped kernels). Nothing for the standard variant.
    #[inline(always)]
    fn prefetch_heads(p: &DecodeParams) {
        if !Self::PER_HEAD {
            return;
        }
        let line = thread::thread_idx_x();
        if line * 128 < p.num_q_heads * 4 {
            // SAFETY: the host checked both arrays to hold `num_q_heads`
            // f32s where present; `line * 128` is inside them.
            unsafe {
                if Self::ALIBI {
                    memory::prefetch_l1(p.alibi_slopes + 128 * line as u64);
                }
                if Self::SINKS && p.sinks != 0 {
                    memory::prefetch_l1(p.sinks + 128 * line as u64);
                }
            }
        }
    }

    /// What a finished row's output is multiplied by for the sinks: `l /
    /// (l + 2^(s_h·log2 e − m))` = `1 / (1 + 2^(s_h·log2 e − lse))` with
    /// `lse` the row's base-2 log-sum-exp; 1 without sinks. Only for rows
    /// written directly: a split row's sink enters its merge, once.
    #[inline(always)]
    fn sink_factor(p: &DecodeParams, head: u32, lse: f32) -> f32 {
        if Self::SINKS && p.sinks != 0 {
            // SAFETY: the host checked `sinks` to hold `num_q_heads` f32s.
            let s = unsafe { f32::from_bits(memory::ld_global_nc_u32(p.sinks + 4 * head as u64)) };
            rcp(1.0 + ex2(s * core::f32::consts::LOG2_E - lse))
        } else {
            1.0
        }
    }
}

/// A score modifier: the logits transform of a [`Parts`] variant.
pub trait ScoreModifier {
    const KIND: ScoreMod;
    /// The base-2 logit of key `key`'s scaled score `x` for a row with
    /// terms `row`.
    fn logit(p: &DecodeParams, x: f32, key: u32, row: &RowTerms) -> f32;
}

/// A mask part of a [`Parts`] variant: which keys it can hide beyond the
/// causal limit (the hooks read the kind).
pub trait MaskPart {
    const KIND: MaskKind;
}

/// The sinks part of a [`Parts`] variant.
pub trait SinksPart {
    const SINKS: bool;
}

/// A variant built from its parts: score modifier `S`, mask `M`, sinks `K`.
pub struct Parts<S, M, K>(PhantomData<(S, M, K)>);

impl<S: ScoreModifier, M: MaskPart, K: SinksPart> AttentionVariant for Parts<S, M, K> {
    type Score = S;
    type Mask = M;
    const SINKS: bool = K::SINKS;
}

/// The scaled score itself: `softmax(scale · q·k)` (the score scale is
/// `scale · log2(e)`).
pub struct PlainScore;

impl ScoreModifier for PlainScore {
    const KIND: ScoreMod = ScoreMod::Plain;
    #[inline(always)]
    fn logit(_p: &DecodeParams, x: f32, _key: u32, _row: &RowTerms) -> f32 {
        x
    }
}

/// Logits soft-cap `c`: the logit is `c · tanh(scale · q·k / c)`, in base 2
/// `c·log2(e) · tanh(…)`. The host sets the score scale to
/// `2·log2(e) · scale / c`, so a scaled score `x` is the base-2 exponent
/// of `tanh(y) = (e^{2y} − 1) / (e^{2y} + 1)`, and `logit_cap` to
/// `c·log2(e)`: six operations a score (`min`, `ex2`, two adds, `rcp`,
/// two multiplies).
/// Its absolute error is a few units in the last place of 1 times the cap
/// (`tanh.approx.f32`'s 2^-11 relative error would be 0.025 in a logit
/// capped at 50, which moves a softmax weight by 2.5 %).
pub struct TanhCap;

impl ScoreModifier for TanhCap {
    const KIND: ScoreMod = ScoreMod::SoftCap;
    #[inline(always)]
    fn logit(p: &DecodeParams, x: f32, _key: u32, _row: &RowTerms) -> f32 {
        // tanh(y) = (e − 1) / (e + 1) with e = 2^x = e^{2y}: x is capped
        // at 64, where the quotient is 1 in f32 (2^x = inf would give
        // inf · 0); 2^x → 0 gives −1. The cap multiplies last, an operand
        // from the parameters' constant bank. (`fma(rcp(1 + e), −2c, c)`
        // held −2c in a register: it spilled the 168-register wide kernels
        // and, as `fma(…, −2, 1) · c`, the 128-register paged int8 wgmma
        // ones.)
        let e = ex2(x.min(64.0));
        (e - 1.0) * rcp(e + 1.0) * p.logit_cap
    }
}

/// ALiBi: the logit is `scale · q·k + slope_h · (t − p)`, in base 2 the
/// scaled score plus `slope_h·log2(e) · (t − p)`. The distance is taken
/// in integers first (exact), then converted: three operations a score.
pub struct AlibiBias;

impl ScoreModifier for AlibiBias {
    const KIND: ScoreMod = ScoreMod::Alibi;
    #[inline(always)]
    fn logit(_p: &DecodeParams, x: f32, key: u32, row: &RowTerms) -> f32 {
        let distance = key.wrapping_sub(row.pos) as i32 as f32;
        crate::arch::math::fma(row.slope, distance, x)
    }
}

/// The causal limit among the new tokens alone.
pub struct CausalMask;

impl MaskPart for CausalMask {
    const KIND: MaskKind = MaskKind::Causal;
}

/// A sliding window and the sequences' first keys, where the launch sets
/// them.
pub struct WindowMask;

impl MaskPart for WindowMask {
    const KIND: MaskKind = MaskKind::Window;
}

/// [`WindowMask`] and a draft tree, where the launch sets one.
pub struct TreeMask;

impl MaskPart for TreeMask {
    const KIND: MaskKind = MaskKind::Tree;
}

/// No sinks.
pub struct NoSinks;

impl SinksPart for NoSinks {
    const SINKS: bool = false;
}

/// The launch's sinks, where it sets them.
pub struct Sinks;

impl SinksPart for Sinks {
    const SINKS: bool = true;
}

/// The compiled variants (`decode_attn_abi::Variant`), by their parts.
pub type Standard = Parts<PlainScore, CausalMask, NoSinks>;
pub type Masked = Parts<PlainScore, WindowMask, Sinks>;
pub type SoftCap = Parts<TanhCap, WindowMask, Sinks>;
pub type Alibi = Parts<AlibiBias, WindowMask, Sinks>;
pub type MaskedTree = Parts<PlainScore, TreeMask, Sinks>;
pub type SoftCapTree = Parts<TanhCap, TreeMask, Sinks>;

impl RowTerms {
    /// The terms of a variant that reads none (the standard softmax's).
    pub const NONE: RowTerms = RowTerms { first: 0, pos: 0, slope: 0.0 };
}

/// A thread's two rows as [`logits`] sees them: their new token, query
/// head and causal limit, their sequence's length, and the first key a
/// row's causal limit, a draft tree or the item's end may hide
/// (`crate::decode::block::mask_from`).
pub struct Rows {
    pub tokens: [u32; 2],
    pub heads: [u32; 2],
    pub limits: [u32; 2],
    pub seq_len: u32,
    pub mask_from: u32,
}

/// The order of [`logits`]' mask and logit: [`Fused`] or
/// [`LogitThenMask`]. (A type, not a flag: a run-time-shaped branch over
/// both orders, even folded, moved the wgmma kernels' code.)
pub trait Order {
    /// The masked step's logits of `s` (see [`logits`]); returns whether
    /// the step tested its keys.
    #[allow(clippy::too_many_arguments)]
    unsafe fn apply<V: AttentionVariant, const T: usize, const E: usize>(
        p: &DecodeParams,
        s: &mut [[f32; E]; T],
        key0: u32,
        keys: u32,
        rows: &Rows,
        seq_first: u32,
        at: impl Fn(usize, usize) -> (u32, usize),
        scale: impl Fn(usize, usize) -> f32,
    ) -> bool;
}

/// Mask and logit in one pass, each score's `-inf` or logit (the wide and
/// narrow bodies).
pub struct Fused;

/// Every logit first, the mask in a second pass over the masked steps (the
/// wgmma body: one pass there measured the same instructions, numbered
/// otherwise, which ptxas allocated with spills in the 128-register
/// kernels).
pub struct LogitThenMask;

impl Order for Fused {
    #[inline(always)]
    #[allow(clippy::needless_range_loop)] // constant indices keep `s` in registers
    unsafe fn apply<V: AttentionVariant, const T: usize, const E: usize>(
        p: &DecodeParams,
        s: &mut [[f32; E]; T],
        key0: u32,
        keys: u32,
        rows: &Rows,
        seq_first: u32,
        at: impl Fn(usize, usize) -> (u32, usize),
        scale: impl Fn(usize, usize) -> f32,
    ) -> bool {
        let masked = V::step_masked(key0, keys, rows.mask_from, V::window_from(p, rows.seq_len, seq_first));
        let terms = [0, 1].map(|r| V::row_terms(p, rows.seq_len, seq_first, rows.tokens[r], rows.heads[r]));
        for n in 0..T {
            for e in 0..E {
                let (key, r) = at(n, e);
                let factor = scale(n, e);
                let hidden = masked && V::hides(p, key, rows.limits[r], &terms[r]);
                s[n][e] = logit::<V>(p, s[n][e], factor, hidden, key, &terms[r]);
            }
        }
        masked
    }
}

impl Order for LogitThenMask {
    #[inline(always)]
    #[allow(clippy::needless_range_loop)]
    unsafe fn apply<V: AttentionVariant, const T: usize, const E: usize>(
        p: &DecodeParams,
        s: &mut [[f32; E]; T],
        key0: u32,
        keys: u32,
        rows: &Rows,
        seq_first: u32,
        at: impl Fn(usize, usize) -> (u32, usize),
        scale: impl Fn(usize, usize) -> f32,
    ) -> bool {
        let terms = [0, 1].map(|r| V::row_terms(p, rows.seq_len, seq_first, rows.tokens[r], rows.heads[r]));
        for n in 0..T {
            for e in 0..E {
                let (key, r) = at(n, e);
                s[n][e] = V::logit(p, s[n][e] * scale(n, e), key, &terms[r]);
            }
        }
        // Only the steps that reach past the first masked key test keys.
        let masked = V::step_masked(key0, keys, rows.mask_from, V::window_from(p, rows.seq_len, seq_first));
        if masked {
            for n in 0..T {
                for e in 0..E {
                    let (key, r) = at(n, e);
                    if V::hides(p, key, rows.limits[r], &terms[r]) {
                        s[n][e] = f32::NEG_INFINITY;
                    }
                }
            }
        }
        masked
    }
}

/// The logits step of every body, written once: turns a thread's raw
/// scores `s[n][e]` of one step (keys `key0 .. key0 + keys`) into base-2
/// logits under variant `V`, with `-inf` where a row does not see the key,
/// in order `O`. A body describes its fragment by closures: `at(n, e)` →
/// (the score's key, which of the thread's two `rows`
/// it belongs to), `scale(n, e)` → its factor
/// ([`AttentionVariant::score_scale`] times a converted Q row's and an int8
/// K row's scales). `first()` reads the sequence's own first key and
/// `batch()` the item's sequence, each where they are used (held, they cost
/// the capped kernels spills: `crate::decode::block::kept_first_key`).
///
/// # Safety
/// The launch's tree arrays, where [`AttentionVariant::tree_applies`], hold
/// `batch × q_len` values (the host checked them).
#[inline(always)]
#[allow(clippy::too_many_arguments, clippy::needless_range_loop)]
pub unsafe fn logits<V: AttentionVariant, O: Order, const T: usize, const E: usize>(
    p: &DecodeParams,
    s: &mut [[f32; E]; T],
    key0: u32,
    keys: u32,
    rows: &Rows,
    first: impl Fn() -> u32,
    batch: impl Fn() -> u32,
    at: impl Fn(usize, usize) -> (u32, usize) + Copy,
    scale: impl Fn(usize, usize) -> f32,
) {
    let masked = O::apply::<V, T, E>(p, s, key0, keys, rows, first(), at, scale);
    if V::tree_applies(p, masked) {
        // A draft tree's pass ([`TreeRow`]), a row at a time.
        for r in 0..2 {
            let tree = tree_row(p, rows.seq_len, first(), batch(), rows.tokens[r]);
            for n in 0..T {
                for e in 0..E {
                    let (key, row) = at(n, e);
                    if row == r && tree.hides(key) {
                        s[n][e] = f32::NEG_INFINITY;
                    }
                }
            }
        }
    }
}

/// The base-2 logit of one score: `-inf` where `hidden`, else the variant's
/// logit of `raw · scale` for key `key` of a row with terms `row`.
#[inline(always)]
fn logit<V: AttentionVariant>(p: &DecodeParams, raw: f32, scale: f32, hidden: bool, key: u32, row: &RowTerms) -> f32 {
    if hidden {
        f32::NEG_INFINITY
    } else {
        V::logit(p, raw * scale, key, row)
    }
}
