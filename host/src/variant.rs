//! A shape's attention variant as orthogonal parts ([`VariantSpec`]:
//! FlashInfer's options), and the device arrays those parts read at run
//! time ([`VariantBuffers`]), checked together in one place
//! ([`VariantSpec::validate`], `check::check_variant_buffers`). The kernel
//! set compiles some combinations of the parts (`decode_attn_abi::Variant`);
//! [`VariantSpec::kernel_variant`] picks the one that serves a spec.

use decode_attn_abi::{MaskKind, ScoreMod, Variant, VariantParts, NO_WINDOW};

use crate::error::{ensure, Error, Result};
use crate::tensor::ElemType;

/// The largest soft-cap a shape takes. The kernels' form of `c · tanh(x / c)`
/// errs by about `c · 2^-23` in a logit (`kernels-gpu/src/variant.rs`, `TanhCap`):
/// emulated on N(0, 4) logits, the output is 2-3 % off at a cap of 3e5 and
/// 180 % at 1e6; at 1e4 the logit error is 1.2e-3. Models use 30 to 50.
pub const MAX_SOFT_CAP: f32 = 1.0e4;

/// The attention variant of a shape: a score modifier (a soft-cap or ALiBi,
/// at most one), masks (a sliding window, key ranges, a draft tree) and
/// sinks, each absent by default (`VariantSpec::default()`: the plain
/// causal softmax). Each present part takes its values at run time
/// ([`VariantBuffers`], `StepInputs::with_seq_starts`), except the cap and
/// the window, which are the shape's.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct VariantSpec {
    /// Logits soft-cap `c` (Gemma 2, Grok): each logit is
    /// `c · tanh(scale · q·k / c)` (`docs/benchmark.md`, "The operation").
    /// `None`: plain `softmax(scale · q·k)`.
    pub soft_cap: Option<f32>,
    /// ALiBi (BLOOM, MPT, Falcon): one f32 slope per query head, a device
    /// array given at run time ([`VariantBuffers::alibi_slopes`]); each
    /// logit gets `slope_h · (t − p)`. Not with a soft-cap.
    pub alibi: bool,
    /// Sliding window of left width `W` (Mistral, Gemma's local layers,
    /// gpt-oss's banded layers): the query at position `p` sees keys
    /// `p − W ..= p` (and, causally, none after it) — FlashAttention's
    /// `window_size = (W, 0)`. The plan reads only the window (its work
    /// starts at most 15 keys, or a page, before it: `docs/benchmark.md`,
    /// "The operation"). `None`: every key up to `p`.
    pub window: Option<u32>,
    /// Per-sequence key ranges `[start_b, L_b)`: sequence b's keys before
    /// `start_b` are not seen (a left-padded batch, a serving engine's
    /// evicted prefix). The starts are a `[batch]` u32 array: on the host
    /// for a plan of host lengths (`DecodeAttention::plan_key_ranges`), on
    /// the device for a capacity plan's steps (`StepInputs::with_seq_starts`),
    /// where a start past `L_b − q_len` reads as `L_b − q_len`. The work
    /// starts at the range (aligned down as a window's start is).
    pub key_ranges: bool,
    /// A speculative-decoding draft tree over each sequence's `q_len` new
    /// tokens (SGLang's and FlashInfer's tree verification): each new token
    /// sees the cached prefix and its ancestors in the tree, itself
    /// included, given at run time as two `[batch, q_len]` device arrays
    /// ([`VariantBuffers::tree_masks`], [`VariantBuffers::tree_positions`]):
    /// u8 masks, bit `j` of entry `(b, i)` set when token `i` sees token `j`
    /// (`j ≤ i`: a token comes after its ancestors), and u32 positions, the
    /// prefix length plus the token's depth, which the window measures
    /// from. Bit `i` is read as set and bits above it as clear, and a
    /// position as at least the prefix length and at most `L − q_len + i`,
    /// so no device value makes a kernel read outside its buffers. Combines
    /// with a window of at least `q_len − 1` keys, sinks, key ranges and a
    /// soft-cap; not with ALiBi.
    pub tree: bool,
    /// Attention sinks (gpt-oss): one f32 logit `s_h` per query head, a
    /// device array given at run time ([`VariantBuffers::sinks`]), which
    /// enters each row's softmax denominator as `exp(s_h − m)` and adds
    /// nothing to the numerator.
    pub sinks: bool,
}

impl VariantSpec {
    /// The plain causal softmax: no part.
    pub const STANDARD: VariantSpec = VariantSpec { soft_cap: None, alibi: false, window: None, key_ranges: false, tree: false, sinks: false };

    /// The parts the kernels must apply (`decode_attn_abi::VariantParts`).
    pub fn parts(&self) -> VariantParts {
        let score = if self.soft_cap.is_some() {
            ScoreMod::SoftCap
        } else if self.alibi {
            ScoreMod::Alibi
        } else {
            ScoreMod::Plain
        };
        let mask = if self.tree {
            MaskKind::Tree
        } else if self.window.is_some() || self.key_ranges {
            MaskKind::Window
        } else {
            MaskKind::Causal
        };
        VariantParts { score, mask, sinks: self.sinks }
    }

    /// The compiled variant whose kernels serve the spec
    /// (`Variant::serving`: the fastest that covers its parts), or an
    /// error naming the part no kernel combines with the others (ALiBi
    /// with a soft-cap, a tree with ALiBi).
    pub fn kernel_variant(&self) -> Result<Variant> {
        ensure(!(self.alibi && self.soft_cap.is_some()), "alibi", "false when soft_cap is set (no kernel applies both; no model does)", "true with a soft-cap")?;
        Variant::serving(self.parts()).ok_or_else(|| Error::invalid("tree", "false when alibi is set (ALiBi's bias would need each new key's tree position; no kernel applies both)", "true with ALiBi"))
    }

    /// The kernels' `DecodeParams::window`: the window, or
    /// `decode_attn_abi::NO_WINDOW`.
    pub fn window_param(&self) -> u32 {
        self.window.unwrap_or(NO_WINDOW)
    }

    /// Checks the parts' values and that they combine, for a shape of
    /// `q_len` new tokens and softmax scale `scale`; the error names the
    /// first bad part.
    pub fn validate(&self, q_len: u32, scale: f32) -> Result<()> {
        if let Some(cap) = self.soft_cap {
            // The kernels compute 2·log2(e)·scale / c and c·log2(e): both
            // finite and the first nonzero.
            let (factor, out) = self.logit_factors(scale);
            ensure(
                cap.is_finite() && cap > 0.0 && factor.is_finite() && factor > 0.0 && out.is_finite(),
                "soft_cap",
                format!("a positive finite cap c with c · log2(e) finite and 2 · log2(e) · scale / c finite and nonzero (scale {scale})"),
                cap,
            )?;
            // The kernels' tanh form errs by about c · 2^-23 in a logit:
            // beyond MAX_SOFT_CAP the output's 1e-2 bound no longer holds.
            ensure(cap <= MAX_SOFT_CAP, "soft_cap", format!("at most {MAX_SOFT_CAP:e} (models use 30 to 50; a cap c costs about c · 2^-23 in each logit)"), cap)?;
        }
        if let Some(w) = self.window {
            ensure(w >= 1 && w != NO_WINDOW, "window", format!("1..{NO_WINDOW} keys left of the query (None: no window)"), w)?;
        }
        // Parts no kernel combines: ALiBi with a soft-cap or a tree.
        self.kernel_variant()?;
        if self.tree {
            // A window of at least q_len − 1 keys shows every new token to
            // every row (a depth is below q_len): the tree alone decides
            // which new keys a row sees, whatever their positions.
            if let Some(w) = self.window {
                ensure(
                    w >= q_len.saturating_sub(1),
                    "window",
                    format!("at least q_len − 1 = {} keys with a draft tree (every new token within every row's window)", q_len.saturating_sub(1)),
                    w,
                )?;
            }
        }
        Ok(())
    }

    /// The kernels' query transform (`DecodeParams::score_scale`) and
    /// soft-cap factor (`logit_cap`) for softmax scale `scale`: `(scale ·
    /// log2 e, 0)`, or with a cap `c` `(2 · log2 e · scale / c, c · log2 e)`.
    pub fn logit_factors(&self, scale: f32) -> (f32, f32) {
        let log2e = std::f32::consts::LOG2_E;
        match self.soft_cap {
            None => (scale * log2e, 0.0),
            Some(cap) => (2.0 * log2e * (scale / cap), cap * log2e),
        }
    }
}

/// The device arrays a variant's parts read at each run (a captured CUDA
/// graph sees their current values), one field a part: each required when
/// the plan's [`VariantSpec`] has its part, and rejected otherwise
/// (`check::check_variant_buffers`). `T` is a tensor view
/// ([`crate::TensorRef`] in [`crate::KvCache::variant`]), or what the
/// checks and the launch read of one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VariantBuffers<T> {
    /// `[num_q_heads]` f32 sink logits ([`VariantSpec::sinks`]).
    pub sinks: Option<T>,
    /// `[num_q_heads]` f32 ALiBi slopes ([`VariantSpec::alibi`]).
    pub alibi_slopes: Option<T>,
    /// `[batch, q_len]` u8 ancestor masks of the step's draft tree
    /// ([`VariantSpec::tree`]).
    pub tree_masks: Option<T>,
    /// `[batch, q_len]` u32 tree positions (prefix length + depth).
    pub tree_positions: Option<T>,
}

impl<T> Default for VariantBuffers<T> {
    fn default() -> Self {
        VariantBuffers { sinks: None, alibi_slopes: None, tree_masks: None, tree_positions: None }
    }
}

impl<T> VariantBuffers<T> {
    /// No arrays: the buffers of a spec without sinks, ALiBi or a tree.
    pub const NONE: VariantBuffers<T> = VariantBuffers { sinks: None, alibi_slopes: None, tree_masks: None, tree_positions: None };

    /// Each present array through `f`.
    pub fn map<U>(self, mut f: impl FnMut(T) -> U) -> VariantBuffers<U> {
        VariantBuffers { sinks: self.sinks.map(&mut f), alibi_slopes: self.alibi_slopes.map(&mut f), tree_masks: self.tree_masks.map(&mut f), tree_positions: self.tree_positions.map(&mut f) }
    }

    /// The arrays with what each must be under `spec` ([`VariantArray`]).
    pub(crate) fn arrays(self, spec: &VariantSpec) -> [VariantArray<T>; 4] {
        use VariantCount::{PerQueryHead, PerRow};
        [
            VariantArray { name: "sinks", part: "sinks", wanted: spec.sinks, elem: ElemType::F32, count: PerQueryHead, what: "f32 sink logits, one per query head", buf: self.sinks },
            VariantArray { name: "alibi_slopes", part: "alibi", wanted: spec.alibi, elem: ElemType::F32, count: PerQueryHead, what: "f32 ALiBi slopes, one per query head", buf: self.alibi_slopes },
            VariantArray { name: "tree_masks", part: "tree", wanted: spec.tree, elem: ElemType::U8, count: PerRow, what: "u8 ancestor masks ([batch, q_len]) of the step's draft tree", buf: self.tree_masks },
            VariantArray { name: "tree_positions", part: "tree", wanted: spec.tree, elem: ElemType::U32, count: PerRow, what: "u32 tree positions ([batch, q_len]) of the step's draft tree", buf: self.tree_positions },
        ]
    }
}

/// How many values a variant array holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VariantCount {
    /// `num_q_heads`.
    PerQueryHead,
    /// `batch × q_len`.
    PerRow,
}

/// One of a [`VariantBuffers`]' arrays with what it must be.
#[derive(Clone, Copy, Debug)]
pub struct VariantArray<T> {
    /// Its parameter name.
    pub name: &'static str,
    /// The [`VariantSpec`] field that asks for it.
    pub part: &'static str,
    /// Whether the spec asks for it.
    pub wanted: bool,
    pub elem: ElemType,
    pub count: VariantCount,
    /// What its values are, for errors.
    pub what: &'static str,
    pub buf: Option<T>,
}
