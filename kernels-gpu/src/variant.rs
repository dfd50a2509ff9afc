//! Attention variants: the hooks of the softmax step, in the spirit of
//! FlashInfer's `variants.cuh`. Each kernel body computes its scores with
//! one call of [`logit`] per score, which applies a variant's
//! - query transform ([`AttentionVariant::score_scale`]: the factor of the
//!   raw `q·k`, per kernel launch; converted Q rows and int8 K rows multiply
//!   their own factors in);
//! - mask ([`AttentionVariant::hides`]: which keys a query row does not see);
//! - logits transform ([`AttentionVariant::logit`]: the base-2 logit of a
//!   scaled score).
//!
//! A variant is a type, monomorphised into its kernels (`Variant` in
//! `decode_attn_abi` names the compiled set), so the standard variant's
//! hooks compile to exactly the arithmetic the bodies had before they
//! existed, and no variant's values cost registers: they are read from the
//! launch's parameters (`DecodeParams::score_scale`, `logit_cap`).

use decode_attn_abi::{DecodeParams, Variant};

use crate::arch::math::{ex2, rcp};

/// The hooks a kernel body applies to every score (see the module docs).
pub trait AttentionVariant {
    /// The variant of the kernel set this type implements.
    const VARIANT: Variant;
    /// Whether the logits are the scaled score times a constant
    /// ([`Variant::linear_in_scale`]): only then may a kernel apply a row's
    /// positive factor to its maximum and in the exponent's FMA instead of
    /// to every score (the wgmma kernels' `fold`).
    const LINEAR_IN_SCALE: bool = Self::VARIANT.linear_in_scale();

    /// The query transform: what every raw score `q·k` of the launch is
    /// multiplied by before [`AttentionVariant::logit`].
    #[inline(always)]
    fn score_scale(p: &DecodeParams) -> f32 {
        p.score_scale
    }

    /// The mask: whether a row whose keys end at `limit` (causal among the
    /// new tokens, and the work item's end) hides `key`.
    #[inline(always)]
    fn hides(_p: &DecodeParams, key: u32, limit: u32) -> bool {
        key >= limit
    }

    /// The logits transform: the base-2 logit of a scaled score `x`.
    fn logit(p: &DecodeParams, x: f32) -> f32;
}

/// `softmax(scale · q·k)`: the score scale is `scale · log2(e)` and the
/// logit is the scaled score.
pub struct Standard;

impl AttentionVariant for Standard {
    const VARIANT: Variant = Variant::Standard;
    #[inline(always)]
    fn logit(_p: &DecodeParams, x: f32) -> f32 {
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
    fn logit(p: &DecodeParams, x: f32) -> f32 {
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

/// The base-2 logit of one score: `-inf` where `hidden` (the variant's
/// mask, [`AttentionVariant::hides`], tested where the step reaches keys
/// some row hides), else the variant's logit of `raw · scale` (`scale`:
/// the row's factor, [`AttentionVariant::score_scale`] times a converted Q
/// row's and an int8 K row's scales).
#[inline(always)]
pub fn logit<V: AttentionVariant>(p: &DecodeParams, raw: f32, scale: f32, hidden: bool) -> f32 {
    if hidden {
        f32::NEG_INFINITY
    } else {
        V::logit(p, raw * scale)
    }
}
