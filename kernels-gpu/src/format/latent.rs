//! DeepSeek V3.2's fp8 latent rows (`Fp8DsMla`, 656 bytes a token: 512
//! e4m3 values, four f32 scales, 64 bf16 RoPE values). Only the MLA family
//! reads them, and it converts each stage into bf16 rows in shared memory
//! first (`decode::mla`'s `convert_raw`): what its MMAs read are bf16
//! rows, so the type's tiles are [`PlainKv<Bf16>`]'s.

use super::{Bf16, KvFormat, PlainKv};

pub struct Fp8DsMlaKv;

impl KvFormat for Fp8DsMlaKv {
    const FORMAT: decode_attn_abi::KvFormat = decode_attn_abi::KvFormat::Fp8DsMla;
    type Compute = Bf16;
    type Query = Bf16;

    #[inline(always)]
    unsafe fn k_fragment_pair<const D: usize>(tile: u32, key: u32, kp: u32, lane: u32) -> [[u32; 4]; 2] {
        PlainKv::<Bf16>::k_fragment_pair::<D>(tile, key, kp, lane)
    }

    #[inline(always)]
    unsafe fn v_fragment_pair<const D: usize>(tile: u32, key: u32, mp: u32, lane: u32) -> [[u32; 4]; 2] {
        PlainKv::<Bf16>::v_fragment_pair::<D>(tile, key, mp, lane)
    }
}
