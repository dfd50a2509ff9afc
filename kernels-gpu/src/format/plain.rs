//! bf16 / fp16 caches: rows of D 16-bit values, copied to shared memory as
//! is and fed to the tensor cores through `ldmatrix`.

use core::marker::PhantomData;

use super::{swizzled, Bf16, Half, KvFormat, F16};
use crate::arch::mma;

pub struct PlainKv<H>(PhantomData<H>);

pub trait PlainFormatId {
    const FORMAT: decode_attn_abi::KvFormat;
}
impl PlainFormatId for Bf16 {
    const FORMAT: decode_attn_abi::KvFormat = decode_attn_abi::KvFormat::Bf16;
}
impl PlainFormatId for F16 {
    const FORMAT: decode_attn_abi::KvFormat = decode_attn_abi::KvFormat::F16;
}

impl<H: Half + PlainFormatId> KvFormat for PlainKv<H> {
    const FORMAT: decode_attn_abi::KvFormat = H::FORMAT;
    type Compute = H;
    type Query = H;


    #[inline(always)]
    unsafe fn k_fragment_pair<const D: usize>(tile: u32, key: u32, kp: u32, lane: u32) -> [[u32; 4]; 2] {
        // Matrix j = lane / 8: keys (j / 2) * 8 .. +8, dims 16 kc + (j % 2) * 8 .. +8.
        let j = lane / 8;
        let row = key + (j / 2) * 8 + lane % 8;
        let at = |kc: u32| mma::ldmatrix_x4(tile + swizzled(row, kc * 2 + j % 2, (D * 2) as u32));
        [at(2 * kp), at(2 * kp + 1)]
    }

    #[inline(always)]
    unsafe fn v_fragment_pair<const D: usize>(tile: u32, key: u32, mp: u32, lane: u32) -> [[u32; 4]; 2] {
        // Matrix j: keys (j % 2) * 8 .. +8, dims 16 np + (j / 2) * 8 .. +8, transposed.
        let j = lane / 8;
        let row = key + (j % 2) * 8 + lane % 8;
        let at = |np: u32| mma::ldmatrix_x4_trans(tile + swizzled(row, np * 2 + j / 2, (D * 2) as u32));
        [at(2 * mp), at(2 * mp + 1)]
    }
}
