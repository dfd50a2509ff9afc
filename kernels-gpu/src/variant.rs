//! Attention variants: the hooks of the softmax step, in the spirit of
//! FlashInfer's `variants.cuh`. The wide and narrow bodies compute each
//! score with one call of [`logit`] (mask and logit together); the wgmma
//! body calls [`AttentionVariant::logit`], then masks in a second pass.
//! Together they apply a variant's
//! - query transform ([`AttentionVariant::score_scale`]: the factor of the
//!   raw `q·k`, per kernel launch; converted Q rows and int8 K rows multiply
//!   their own factors in);
//! - mask ([`AttentionVariant::hides`]: which keys a query row does not see:
//!   the causal limit, a sliding window's start, a sequence's first key,
//!   and a draft tree's non-ancestors);
//! - logits transform ([`AttentionVariant::logit`]: the base-2 logit of a
//!   scaled score, which may depend on the key's distance to the row: ALiBi);
//!
//! and its epilogue applies the sinks ([`sink_factor`]; split rows get
//! theirs in the merge, `crate::merge`).
//!
//! A variant is a type, monomorphised into its kernels (`Variant` in
//! `decode_attn_abi` names the compiled set), so the standard variant's
//! hooks compile to exactly the arithmetic the bodies had before they
//! existed, and no variant's values cost registers they do not use: they
//! are read from the launch's parameters (`DecodeParams::score_scale`,
//! `logit_cap`, `window`, `sinks`, `alibi_slopes`, `tree_masks`). Every
//! variant but the standard one takes a window and sinks, and all but ALiBi
//! a draft tree, whose absence is a value (`NO_WINDOW`, a null pointer), so
//! that one kernel serves gpt-oss's windowed and full layers, Gemma 2's
//! local and global ones, and a speculative step's tree or none.

use decode_attn_abi::{DecodeParams, Variant};

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

/// Whether a step's logits take the draft tree's pass: kernels of a variant
/// that takes a tree, a launch with one, a step that tests keys.
#[inline(always)]
pub fn tree_applies<V: AttentionVariant>(p: &DecodeParams, masked: bool) -> bool {
    V::TREE && masked && p.tree_masks != 0
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

/// The hooks a kernel body applies to every score (see the module docs).
pub trait AttentionVariant {
    /// The variant of the kernel set this type implements.
    const VARIANT: Variant;
    /// Whether the logits are the scaled score times a constant
    /// ([`Variant::linear_in_scale`]): only then may a kernel apply a row's
    /// positive factor to its maximum and in the exponent's FMA instead of
    /// to every score (the wgmma kernels' `fold`).
    const LINEAR_IN_SCALE: bool = Self::VARIANT.linear_in_scale();
    /// Whether the launch's window and sinks apply
    /// ([`Variant::takes_window_and_sinks`]).
    const WINDOW_AND_SINKS: bool = Self::VARIANT.takes_window_and_sinks();
    /// Whether the logits carry ALiBi's bias (the row terms' slope).
    const ALIBI: bool = false;
    /// Whether the launch's draft tree applies ([`Variant::takes_tree`]).
    const TREE: bool = Self::VARIANT.takes_tree();

    /// The query transform: what every raw score `q·k` of the launch is
    /// multiplied by before [`AttentionVariant::logit`].
    #[inline(always)]
    fn score_scale(p: &DecodeParams) -> f32 {
        p.score_scale
    }

    /// The mask: whether a row whose keys end at `limit` (causal among the
    /// new tokens, and the work item's end) hides `key`.
    #[inline(always)]
    fn hides(_p: &DecodeParams, key: u32, limit: u32, row: &RowTerms) -> bool {
        key >= limit || (Self::WINDOW_AND_SINKS && key < row.first)
    }

    /// The logits transform: the base-2 logit of key `key`'s scaled score
    /// `x` for a row with terms `row`.
    fn logit(p: &DecodeParams, x: f32, key: u32, row: &RowTerms) -> f32;
}

/// `softmax(scale · q·k)`: the score scale is `scale · log2(e)` and the
/// logit is the scaled score.
pub struct Standard;

impl AttentionVariant for Standard {
    const VARIANT: Variant = Variant::Standard;
    #[inline(always)]
    fn logit(_p: &DecodeParams, x: f32, _key: u32, _row: &RowTerms) -> f32 {
        x
    }
}

/// The standard logits under any of the launch's masks (a sliding window,
/// the sequences' first keys, a draft tree) and / or sinks.
pub struct Masked;

impl AttentionVariant for Masked {
    const VARIANT: Variant = Variant::Masked;
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
pub struct SoftCap;

impl AttentionVariant for SoftCap {
    const VARIANT: Variant = Variant::SoftCap;
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
pub struct Alibi;

/// [`Masked`] verifying a draft tree (`DecodeParams::tree_masks`).
pub struct MaskedTree;

impl AttentionVariant for MaskedTree {
    const VARIANT: Variant = Variant::MaskedTree;
    #[inline(always)]
    fn logit(p: &DecodeParams, x: f32, key: u32, row: &RowTerms) -> f32 {
        Masked::logit(p, x, key, row)
    }
}

/// [`SoftCap`] verifying a draft tree.
pub struct SoftCapTree;

impl AttentionVariant for SoftCapTree {
    const VARIANT: Variant = Variant::SoftCapTree;
    #[inline(always)]
    fn logit(p: &DecodeParams, x: f32, key: u32, row: &RowTerms) -> f32 {
        SoftCap::logit(p, x, key, row)
    }
}

impl AttentionVariant for Alibi {
    const VARIANT: Variant = Variant::Alibi;
    const ALIBI: bool = true;
    #[inline(always)]
    fn logit(_p: &DecodeParams, x: f32, key: u32, row: &RowTerms) -> f32 {
        let distance = key.wrapping_sub(row.pos) as i32 as f32;
        crate::arch::math::fma(row.slope, distance, x)
    }
}

impl RowTerms {
    /// The terms of a variant that reads none (the standard softmax's).
    pub const NONE: RowTerms = RowTerms { first: 0, pos: 0, slope: 0.0 };
}

/// The terms of the row of `token` (of the step's new tokens) and query
/// head `head` in a sequence of `seq_len` keys whose own first key is
/// `seq_first` (`crate::decode::block::first_key`), for one step: computed
/// afresh at each step (the row's token and head through
/// [`thread::opaque`]), not held across the key loop, where they spilled
/// the 128-register wgmma kernels (docs/perf.md, "Variant kernels"). An
/// ALiBi slope is an L1 hit. The standard variant's are [`RowTerms::NONE`],
/// computed from nothing (so its kernels' code is what it was before the
/// terms existed).
/// Under a draft tree the first key is measured with a window `q_len − 1`
/// keys wider (`DecodeParams::row_window`): the least a tree position's
/// first key can be; the tree's pass ([`tree_row`]) masks the keys the
/// row's own position's window does not show.
#[inline(always)]
pub fn row_terms<V: AttentionVariant>(p: &DecodeParams, seq_len: u32, seq_first: u32, token: u32, head: u32) -> RowTerms {
    if !V::WINDOW_AND_SINKS && !V::ALIBI {
        return RowTerms::NONE;
    }
    let pos = seq_len.wrapping_sub(p.q_len).wrapping_add(thread::opaque(token));
    let window = if V::TREE { p.row_window } else { p.window };
    let first = if V::WINDOW_AND_SINKS { pos.saturating_sub(window).max(seq_first) } else { 0 };
    let slope = if V::ALIBI {
        // SAFETY: the host checked `alibi_slopes` to hold `num_q_heads` f32s
        // (a missing row's head is 0).
        let slope = unsafe { f32::from_bits(memory::ld_global_nc_u32(p.alibi_slopes + 4 * thread::opaque(head) as u64)) };
        slope * core::f32::consts::LOG2_E
    } else {
        0.0
    };
    RowTerms { first, pos, slope }
}

/// Starts the loads of the launch's per-head values (ALiBi slopes, sinks)
/// at the kernel's start, a 128-byte line per thread of the first few, so
/// that the first step's slopes and the epilogue's or merge's sinks hit L1:
/// cold, they waited on HBM in every block (docs/perf.md, "Variant
/// kernels"). Called before anything else is live (from the rows' heads,
/// later, it moved ptxas to spills in the capped kernels). Nothing for the
/// standard variant.
#[inline(always)]
pub fn prefetch_heads<V: AttentionVariant>(p: &DecodeParams) {
    if !V::ALIBI && !V::WINDOW_AND_SINKS {
        return;
    }
    let line = thread::thread_idx_x();
    if line * 128 < p.num_q_heads * 4 {
        // SAFETY: the host checked both arrays to hold `num_q_heads` f32s
        // where present; `line * 128` is inside them.
        unsafe {
            if V::ALIBI {
                memory::prefetch_l1(p.alibi_slopes + 128 * line as u64);
            }
            if V::WINDOW_AND_SINKS && p.sinks != 0 {
                memory::prefetch_l1(p.sinks + 128 * line as u64);
            }
        }
    }
}

/// Keys below this may be outside the window of some row of a sequence of
/// `seq_len` keys (its last new token's first key), or before the
/// sequence's own first key `seq_first`; 0 for variants without a window
/// (and for a launch without a window or first keys).
#[inline(always)]
pub fn window_from<V: AttentionVariant>(p: &DecodeParams, seq_len: u32, seq_first: u32) -> u32 {
    if V::WINDOW_AND_SINKS {
        (seq_len.wrapping_sub(1)).saturating_sub(p.window).max(seq_first)
    } else {
        0
    }
}

/// Whether a step over keys `key0 .. key0 + keys` must test its keys
/// against the rows' masks: it reaches the first key a row's causal limit,
/// a draft tree or the item's end hides (`mask_from`,
/// `crate::decode::block::mask_from`), or (windows) starts below the
/// last first key a row's window shows (`window_from`).
#[inline(always)]
pub fn step_masked<V: AttentionVariant>(key0: u32, keys: u32, mask_from: u32, window_from: u32) -> bool {
    key0 + keys > mask_from || (V::WINDOW_AND_SINKS && key0 < window_from)
}

/// The base-2 logit of one score: `-inf` where `hidden` (the variant's
/// mask, [`AttentionVariant::hides`], tested where the step reaches keys
/// some row hides), else the variant's logit of `raw · scale` (`scale`:
/// the row's factor, [`AttentionVariant::score_scale`] times a converted Q
/// row's and an int8 K row's scales) for key `key` of a row with terms `row`.
#[inline(always)]
pub fn logit<V: AttentionVariant>(p: &DecodeParams, raw: f32, scale: f32, hidden: bool, key: u32, row: &RowTerms) -> f32 {
    if hidden {
        f32::NEG_INFINITY
    } else {
        V::logit(p, raw * scale, key, row)
    }
}

/// What a finished row's output is multiplied by for the sinks: `l / (l +
/// 2^(s_h·log2 e − m))` = `1 / (1 + 2^(s_h·log2 e − lse))` with `lse` the
/// row's base-2 log-sum-exp; 1 without sinks. Only for rows written
/// directly: a split row's sink enters its merge, once.
#[inline(always)]
pub fn sink_factor<V: AttentionVariant>(p: &DecodeParams, head: u32, lse: f32) -> f32 {
    if V::WINDOW_AND_SINKS && p.sinks != 0 {
        // SAFETY: the host checked `sinks` to hold `num_q_heads` f32s.
        let s = unsafe { f32::from_bits(memory::ld_global_nc_u32(p.sinks + 4 * head as u64)) };
        rcp(1.0 + ex2(s * core::f32::consts::LOG2_E - lse))
    } else {
        1.0
    }
}
