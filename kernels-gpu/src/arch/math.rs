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
