//! Fast math and packing conversions.

/// `ex2.approx.ftz.f32`: 2^x (ex2(-inf) = 0).
#[inline(always)]
pub fn ex2(x: f32) -> f32 {
    let r: f32;
    // SAFETY: pure arithmetic.
    unsafe {
        core::arch::asm!("ex2.approx.ftz.f32 {r}, {x};", r = out(reg32) r, x = in(reg32) x,
            options(pure, nomem, nostack));
    }
    r
}

/// `fma.rn.f32`: a·b + c, rounded once.
#[inline(always)]
pub fn fma(a: f32, b: f32, c: f32) -> f32 {
    let r: f32;
    // SAFETY: pure arithmetic.
    unsafe {
        core::arch::asm!("fma.rn.f32 {r}, {a}, {b}, {c};", r = out(reg32) r, a = in(reg32) a, b = in(reg32) b, c = in(reg32) c,
            options(pure, nomem, nostack));
    }
    r
}

/// `lg2.approx.ftz.f32`: log2(x).
#[inline(always)]
pub fn lg2(x: f32) -> f32 {
    let r: f32;
    // SAFETY: pure arithmetic.
    unsafe {
        core::arch::asm!("lg2.approx.ftz.f32 {r}, {x};", r = out(reg32) r, x = in(reg32) x,
            options(pure, nomem, nostack));
    }
    r
}

/// `rcp.approx.ftz.f32`: 1/x.
#[inline(always)]
pub fn rcp(x: f32) -> f32 {
    let r: f32;
    // SAFETY: pure arithmetic.
    unsafe {
        core::arch::asm!("rcp.approx.ftz.f32 {r}, {x};", r = out(reg32) r, x = in(reg32) x,
            options(pure, nomem, nostack));
    }
    r
}

/// `cvt.rn.bf16x2.f32`: two f32 → packed bf16 pair, `lo` in the low half.
#[inline(always)]
pub fn pack_bf16x2(lo: f32, hi: f32) -> u32 {
    let r: u32;
    // SAFETY: pure arithmetic.
    unsafe {
        core::arch::asm!("cvt.rn.bf16x2.f32 {r}, {hi}, {lo};", r = out(reg32) r,
            hi = in(reg32) hi, lo = in(reg32) lo, options(pure, nomem, nostack));
    }
    r
}

/// `cvt.rn.f16x2.f32`: two f32 → packed f16 pair, `lo` in the low half.
#[inline(always)]
pub fn pack_f16x2(lo: f32, hi: f32) -> u32 {
    let r: u32;
    // SAFETY: pure arithmetic.
    unsafe {
        core::arch::asm!("cvt.rn.f16x2.f32 {r}, {hi}, {lo};", r = out(reg32) r,
            hi = in(reg32) hi, lo = in(reg32) lo, options(pure, nomem, nostack));
    }
    r
}

/// `prmt.b32`: byte `i` of the result is byte `sel.nibble[i]` of `{b, a}`
/// (0..4 select `a`'s bytes, 4..8 `b`'s).
#[inline(always)]
pub fn prmt(a: u32, b: u32, sel: u32) -> u32 {
    let r: u32;
    // SAFETY: pure arithmetic.
    unsafe {
        core::arch::asm!("prmt.b32 {r}, {a}, {b}, {s};", r = out(reg32) r, a = in(reg32) a, b = in(reg32) b, s = in(reg32) sel,
            options(pure, nomem, nostack));
    }
    r
}

/// `lop3.b32` with LUT 0xEA: `(a & MASK) | BITS` in one instruction, both
/// constants immediates. Written as two Rust operations it becomes two
/// `LOP3` in SASS (an `and`, then an `or`): the magic-number extractions of
/// int4 spent half their integer-pipe issue on that. As immediates, ptxas
/// may rematerialize the constants instead of holding (or spilling) them.
#[inline(always)]
pub fn and_or<const MASK: u32, const BITS: u32>(a: u32) -> u32 {
    let r: u32;
    // SAFETY: pure arithmetic.
    unsafe {
        core::arch::asm!("lop3.b32 {r}, {a}, {m}, {b}, 0xEA;", r = out(reg32) r, a = in(reg32) a, m = const MASK, b = const BITS,
            options(pure, nomem, nostack));
    }
    r
}

/// Both halves of a packed pair set to its low (`HI = false`) or high half.
/// Written as a split and a repack (not a `prmt`), so that ptxas can fold it
/// into the `.H0_H0` / `.H1_H1` operand selector of the f16x2 instruction
/// that reads it instead of issuing a `PRMT`.
#[inline(always)]
pub fn splat_half<const HI: bool>(x: u32) -> u32 {
    let r: u32;
    // SAFETY: pure arithmetic.
    unsafe {
        if HI {
            core::arch::asm!("{{ .reg .b16 l, h; mov.b32 {{l, h}}, {x}; mov.b32 {r}, {{h, h}}; }}", r = out(reg32) r, x = in(reg32) x,
                options(pure, nomem, nostack));
        } else {
            core::arch::asm!("{{ .reg .b16 l, h; mov.b32 {{l, h}}, {x}; mov.b32 {r}, {{l, l}}; }}", r = out(reg32) r, x = in(reg32) x,
                options(pure, nomem, nostack));
        }
    }
    r
}

/// `sub.rn.f16x2`.
#[inline(always)]
pub fn sub_f16x2(a: u32, b: u32) -> u32 {
    let r: u32;
    // SAFETY: pure arithmetic.
    unsafe {
        core::arch::asm!("sub.rn.f16x2 {r}, {a}, {b};", r = out(reg32) r, a = in(reg32) a, b = in(reg32) b,
            options(pure, nomem, nostack));
    }
    r
}

/// `cvt.rni.s32.f32`: round to the nearest integer, ties to even.
#[inline(always)]
pub fn rint_i32(x: f32) -> i32 {
    let r: i32;
    // SAFETY: pure arithmetic.
    unsafe {
        core::arch::asm!("cvt.rni.s32.f32 {r}, {x};", r = out(reg32) r, x = in(reg32) x, options(pure, nomem, nostack));
    }
    r
}

/// The two bf16 values of a packed pair as f32 (`lo` half first): exact.
#[inline(always)]
pub fn unpack_bf16x2(x: u32) -> (f32, f32) {
    (f32::from_bits(x << 16), f32::from_bits(x & 0xFFFF_0000))
}

/// `cvt.f32.f16` of both halves of a packed pair (`lo` half first); exact.
#[inline(always)]
pub fn unpack_f16x2(x: u32) -> (f32, f32) {
    let (lo, hi): (f32, f32);
    // SAFETY: pure arithmetic.
    unsafe {
        core::arch::asm!(
            "{{ .reg .b16 l, h; mov.b32 {{l, h}}, {x}; cvt.f32.f16 {lo}, l; cvt.f32.f16 {hi}, h; }}",
            x = in(reg32) x, lo = out(reg32) lo, hi = out(reg32) hi, options(pure, nomem, nostack));
    }
    (lo, hi)
}

/// `fma.rn.f16x2`: `a·b + c` on packed pairs.
#[inline(always)]
pub fn fma_f16x2(a: u32, b: u32, c: u32) -> u32 {
    let r: u32;
    // SAFETY: pure arithmetic.
    unsafe {
        core::arch::asm!("fma.rn.f16x2 {r}, {a}, {b}, {c};", r = out(reg32) r, a = in(reg32) a, b = in(reg32) b, c = in(reg32) c,
            options(pure, nomem, nostack));
    }
    r
}

/// `cvt.rn.f16.f32`, as the 16 bits of the half.
#[inline(always)]
pub fn f16_bits(x: f32) -> u32 {
    let r: u32;
    // SAFETY: pure arithmetic.
    unsafe {
        core::arch::asm!("{{ .reg .b16 h; cvt.rn.f16.f32 h, {x}; cvt.u32.u16 {r}, h; }}", r = out(reg32) r, x = in(reg32) x,
            options(pure, nomem, nostack));
    }
    r
}

/// `cvt.rn.f16x2.e4m3x2`: the two fp8 e4m3 values in the low 16 bits of
/// `pair` (first value in bits 8..16, as PTX orders the pair) as an f16x2,
/// exactly (every e4m3 value is an f16).
#[inline(always)]
pub fn f16x2_from_e4m3x2(pair: u32) -> u32 {
    let r: u32;
    // SAFETY: pure arithmetic on a 16-bit operand.
    unsafe {
        core::arch::asm!(
            "{{ .reg .b16 p; cvt.u16.u32 p, {a}; cvt.rn.f16x2.e4m3x2 {r}, p; }}",
            r = out(reg32) r, a = in(reg32) pair, options(pure, nomem, nostack)
        );
    }
    r
}

/// Four fp8 e4m3 values (the bytes of `x`, the first lowest) as two f16
/// pairs (bytes 0-1, bytes 2-3), exactly: [`f16x2_from_e4m3x2`] of each
/// half, the halves split in PTX so that ptxas converts from the register's
/// halves without shifts or masks.
#[inline(always)]
pub fn f16x4_from_e4m3x4(x: u32) -> [u32; 2] {
    let (lo, hi): (u32, u32);
    // SAFETY: pure arithmetic.
    unsafe {
        core::arch::asm!(
            "{{ .reg .b16 l, h; mov.b32 {{l, h}}, {x}; cvt.rn.f16x2.e4m3x2 {lo}, l; cvt.rn.f16x2.e4m3x2 {hi}, h; }}",
            lo = out(reg32) lo, hi = out(reg32) hi, x = in(reg32) x, options(pure, nomem, nostack)
        );
    }
    [lo, hi]
}

/// `cvt.rn.satfinite.e4m3x2.f32`: `hi` and `lo` as two fp8 e4m3 values
/// (`hi` in bits 8..16), rounded to nearest even, saturated to ±448, NaN
/// kept: `decode_attn_abi::e4m3_from_f32` is its CPU twin.
#[inline(always)]
pub fn e4m3x2_from_f32(hi: f32, lo: f32) -> u32 {
    let r: u32;
    // SAFETY: pure arithmetic.
    unsafe {
        core::arch::asm!(
            "{{ .reg .b16 p; cvt.rn.satfinite.e4m3x2.f32 p, {h}, {l}; cvt.u32.u16 {r}, p; }}",
            r = out(reg32) r, h = in(reg32) hi, l = in(reg32) lo, options(pure, nomem, nostack)
        );
    }
    r
}

/// `max.f16x2`: lane-wise maximum; a NaN lane gives the other operand.
#[inline(always)]
pub fn max_f16x2(a: u32, b: u32) -> u32 {
    let r: u32;
    // SAFETY: pure arithmetic.
    unsafe {
        core::arch::asm!("max.f16x2 {r}, {a}, {b};", r = out(reg32) r, a = in(reg32) a, b = in(reg32) b,
            options(pure, nomem, nostack));
    }
    r
}
