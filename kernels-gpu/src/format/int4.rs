//! int4 group-wise caches: rows of D/2 bytes of 4-bit values (asymmetric,
//! q in 0..=15) and, per group of G head dims, an fp16 scale and zero in
//! scales (`x ≈ q·scale + zero`), for K and V each.
//!
//! Within each 32-bit word of a row (8 consecutive dims p0..p7) the nibbles
//! are stored in the slot order `p0 p2 p4 p6 p1 p3 p5 p7`, so that the
//! magic-number extractions `(w & 0x000f000f) | 0x64006400` (fp16 1024 + n)
//! and `(w & 0x00f000f0) | 0x54005400` (64 + n), on `w` and on `w >> 8`,
//! yield the pairs (p0,p1), (p2,p3), (p4,p5), (p6,p7). A pair then costs one
//! `sub.f16x2` and one `fma.rn.f16x2` with the group's scale and zero.
//! - K: a thread reads word c of a 32-dim chunk and uses its 8 dims as the
//!   logical dims {2c, 2c+1, 2c+8, 2c+9} of two k-chunks (`q_position`).
//! - V: a 16-bit `ldmatrix .trans` over the nibble rows gives each thread 4
//!   nibbles of two keys; the same extractions give key pairs per dim, in
//!   the output-dim order `o_pair` describes.

use core::marker::PhantomData;

use decode_attn_abi::{tile_config, Family};

use super::{swizzled, Half, KvFormat, LinearRows, StageTiles, TileLayout, HALF_TILE};
use crate::arch::{math, mma, shared};

pub struct Int4Kv<Q, const G: u32>(PhantomData<Q>);

/// `(w & MASK) | MAGIC`: the nibbles under `MASK` as fp16 `magic + n`. One
/// `lop3` (its second constant then lives in a register) up to D = 128; an
/// `and` and an `or` with immediates beyond, where the wide D = 256 kernel
/// sits at 255 registers and the held constant spilled.
#[inline(always)]
fn extract<const D: usize, const MASK: u32, const MAGIC: u32>(w: u32) -> u32 {
    if D <= 128 {
        math::and_or::<MASK, MAGIC>(w)
    } else {
        (w & MASK) | MAGIC
    }
}

/// 1024 + n for nibble slots (0, 4) of each half-word pair.
#[inline(always)]
fn magic_a<const D: usize>(w: u32) -> u32 {
    extract::<D, 0x000F_000F, A>(w)
}

/// 64 + n for nibble slots (1, 5).
#[inline(always)]
fn magic_b<const D: usize>(w: u32) -> u32 {
    extract::<D, 0x00F0_00F0, B>(w)
}

/// `(h - magic)·s + z` on a pair: exact integers, then one rounding.
#[inline(always)]
fn dequant(h: u32, magic: u32, s: u32, z: u32) -> u32 {
    math::fma_f16x2(math::sub_f16x2(h, magic), s, z)
}

const A: u32 = 0x6400_6400;
const B: u32 = 0x5400_5400;

impl<Q: Half, const G: u32> KvFormat for Int4Kv<Q, G> {
    const FORMAT: decode_attn_abi::KvFormat = match G {
        32 => decode_attn_abi::KvFormat::Int4G32,
        64 => decode_attn_abi::KvFormat::Int4G64,
        _ => decode_attn_abi::KvFormat::Int4G128,
    };
    type Compute = super::F16;
    type Query = Q;

    #[inline(always)]
    fn q_position(dim: u32) -> (u32, u32) {
        let (m, c, j) = (dim / 32, (dim % 32) / 8, dim % 8);
        (2 * m + j / 4, 2 * c + (j & 1) + 8 * ((j / 2) & 1))
    }

    #[inline(always)]
    fn v_dim(nt: u32, n: u32) -> u32 {
        32 * (nt / 4) + 8 * (n / 2) + 2 * (nt % 4) + n % 2
    }



    /// Both k-chunks of 32-dim chunk `kp` come from one word per key (low
    /// and high byte of each half-word) under one scale and zero.
    #[inline(always)]
    unsafe fn k_fragment_pair<const D: usize>(tile: u32, key: u32, kp: u32, lane: u32) -> [[u32; 4]; 2] {
        let cfg = const { tile_config(<Self as KvFormat>::FORMAT, D as u32, Family::Wide) };
        Self::k_fragment_pair_in::<D>(tile, tile + cfg.side_offset(), key, kp, lane)
    }

    #[inline(always)]
    unsafe fn k_fragment_pair_in<const D: usize>(tile: u32, side: u32, key: u32, kp: u32, lane: u32) -> [[u32; 4]; 2] {
        let cfg = const { tile_config(<Self as KvFormat>::FORMAT, D as u32, Family::Wide) };
        let sr = cfg.scale_bytes;
        let (g, c) = (lane / 4, lane % 4);
        let group = (32 * kp + 8 * c) / G;
        let mut out = [[0u32; 4]; 2];
        for half in 0..2u32 {
            let row = key + 8 * half + g;
            let w = shared::ld_shared_u32(tile + swizzled(row, kp, (D / 2) as u32) + 4 * c);
            let sz = shared::ld_shared_u32(side + row * sr + 4 * group);
            let (s, z) = (math::splat_half::<false>(sz), math::splat_half::<true>(sz));
            for (k, o) in out.iter_mut().enumerate() {
                let w = w >> (8 * k);
                o[2 * half as usize] = dequant(magic_a::<D>(w), A, s, z);
                o[2 * half as usize + 1] = dequant(magic_b::<D>(w), B, s, z);
            }
        }
        out
    }

    /// Both 16-dim tiles of 32-dim chunk `mp` come from one `ldmatrix` and
    /// one set of per-key scales and zeros.
    #[inline(always)]
    unsafe fn v_fragment_pair<const D: usize>(tile: u32, key: u32, mp: u32, lane: u32) -> [[u32; 4]; 2] {
        let cfg = const { tile_config(<Self as KvFormat>::FORMAT, D as u32, Family::Wide) };
        Self::v_fragment_pair_in::<D>(tile, tile - cfg.v_offset() + cfg.side_offset() + cfg.keys_per_stage * cfg.scale_bytes, key, mp, lane)
    }

    #[inline(always)]
    unsafe fn v_fragment_pair_in<const D: usize>(tile: u32, side: u32, key: u32, mp: u32, lane: u32) -> [[u32; 4]; 2] {
        let cfg = const { tile_config(<Self as KvFormat>::FORMAT, D as u32, Family::Wide) };
        let sr = cfg.scale_bytes;
        let [w0, w1] = mma::ldmatrix_x2_trans(tile + swizzled(key + lane % 16, mp, (D / 2) as u32));
        let group = 32 * mp / G;
        let c2 = 2 * (lane % 4);
        let sz = |k: u32| shared::ld_shared_u32(side + (key + k) * sr + 4 * group);
        let (sz0, sz1, sz8, sz9) = (sz(c2), sz(c2 + 1), sz(c2 + 8), sz(c2 + 9));
        // (scale, scale) and (zero, zero) of keys 2c, 2c+1 and 2c+8, 2c+9.
        let (s01, z01) = (math::prmt(sz0, sz1, 0x5410), math::prmt(sz0, sz1, 0x7632));
        let (s89, z89) = (math::prmt(sz8, sz9, 0x5410), math::prmt(sz8, sz9, 0x7632));
        let mut out = [[0u32; 4]; 2];
        for (k, o) in out.iter_mut().enumerate() {
            let (w0, w1) = (w0 >> (8 * k), w1 >> (8 * k));
            *o = [
                dequant(magic_a::<D>(w0), A, s01, z01),
                dequant(magic_a::<D>(w1), A, s89, z89),
                dequant(magic_b::<D>(w0), B, s01, z01),
                dequant(magic_b::<D>(w1), B, s89, z89),
            ];
        }
        out
    }

    /// Dequantized (scale and zero applied): a 16-byte chunk of a row (32
    /// dims, one group's or part of one) becomes four 16-bit chunks, one
    /// word each, its pairs in order.
    #[inline(always)]
    unsafe fn stage_to_half<const D: usize, const EAGER: bool, const HALVES: usize>(stage: StageTiles, key: u32, _valid: u32, k_half: u32, v_half: u32, row: u32, t: u32) {
        let sr = const { tile_config(<Self as KvFormat>::FORMAT, D as u32, Family::Wgmma).scale_bytes };
        let chunks = D as u32 / 32;
        const JOBS: usize = (2 * decode_attn_abi::WGMMA_KEYS / 8 * 4 / 16) as usize;
        const { assert!(D == 128 && (HALVES == 1 || HALVES == 2)) };
        let job = |h: usize, i: usize| {
            let (is_v, r, c) = decode_attn_abi::wgmma_conversion_job(t, i as u32, chunks);
            let r = r + h as u32 * decode_attn_abi::WGMMA_KEYS;
            let (src, side, dst) = if is_v { (stage.v, stage.v_scales, v_half) } else { (stage.k, stage.k_scales, k_half) };
            (src + LinearRows.at(key + r, c, (D / 2) as u32), side + (key + r) * sr + 4 * (32 * c / G), dst, row + r, c)
        };
        let mut eager = [[([0u32; 4], 0u32); JOBS]; HALVES];
        if EAGER {
            for (h, jobs) in eager.iter_mut().enumerate() {
                for (i, e) in jobs.iter_mut().enumerate() {
                    let (src, side, ..) = job(h, i);
                    *e = (shared::ld_shared_v4_u32(src), shared::ld_shared_u32(side));
                }
            }
        }
        for (h, jobs) in eager.iter().enumerate() {
            for (i, early) in jobs.iter().enumerate() {
                let (src, side, dst, r, c) = job(h, i);
                let (w, sz) = if EAGER { *early } else { (shared::ld_shared_v4_u32(src), shared::ld_shared_u32(side)) };
                let (s, z) = (math::splat_half::<false>(sz), math::splat_half::<true>(sz));
                for (n, &x) in w.iter().enumerate() {
                    let pairs = [
                        dequant(magic_a::<D>(x), A, s, z),
                        dequant(magic_b::<D>(x), B, s, z),
                        dequant(magic_a::<D>(x >> 8), A, s, z),
                        dequant(magic_b::<D>(x >> 8), B, s, z),
                    ];
                    shared::st_shared_v4_u32(dst + HALF_TILE.at(r, 4 * c + n as u32, 0), pairs);
                }
            }
        }
    }
}
