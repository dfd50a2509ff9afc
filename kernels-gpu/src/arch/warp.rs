//! Warp shuffles and the warp barrier.

/// `shfl.sync.bfly.b32` over the full warp: value from lane `lane ^ mask`.
#[inline(always)]
pub fn shfl_xor_f32(v: f32, mask: u32) -> f32 {
    let r: f32;
    // SAFETY: all 32 lanes are active where this is called (full-warp code paths).
    unsafe {
        core::arch::asm!(
            "shfl.sync.bfly.b32 {r}, {v}, {m}, 0x1f, 0xffffffff;",
            r = out(reg32) r, v = in(reg32) v, m = in(reg32) mask,
            // Not `pure`: LLVM would then be free to sink the shuffle into a
            // branch that uses its result (e.g. `if lane % 4 == 0`), where a
            // full-mask shuffle by 8 lanes deadlocks the warp.
            options(nomem, nostack)
        );
    }
    r
}

/// Max over the 4 lanes of a quad (lanes sharing `lane / 4`).
#[inline(always)]
pub fn quad_max(v: f32) -> f32 {
    let v = v.max(shfl_xor_f32(v, 1));
    v.max(shfl_xor_f32(v, 2))
}

/// Max over the 8 lanes of an octet (lanes sharing `lane / 8`).
#[inline(always)]
pub fn octet_max(v: f32) -> f32 {
    let v = quad_max(v);
    v.max(shfl_xor_f32(v, 4))
}

/// Sum over the 4 lanes of a quad.
#[inline(always)]
pub fn quad_sum(v: f32) -> f32 {
    let v = v + shfl_xor_f32(v, 1);
    v + shfl_xor_f32(v, 2)
}

/// Max over the whole warp.
#[inline(always)]
pub fn warp_max(mut v: f32) -> f32 {
    let mut m = 16;
    while m > 0 {
        v = v.max(shfl_xor_f32(v, m));
        m /= 2;
    }
    v
}


/// Max over the 8 lanes sharing `lane % 4` (one column of an mma C tile).
#[inline(always)]
pub fn column_max(v: f32) -> f32 {
    let v = v.max(shfl_xor_f32(v, 4));
    let v = v.max(shfl_xor_f32(v, 8));
    v.max(shfl_xor_f32(v, 16))
}

/// Sum over the 8 lanes sharing `lane % 4`.
#[inline(always)]
pub fn column_sum(v: f32) -> f32 {
    let v = v + shfl_xor_f32(v, 4);
    let v = v + shfl_xor_f32(v, 8);
    v + shfl_xor_f32(v, 16)
}

/// `vote.sync.any.pred` over the full warp: whether `p` holds on any lane.
#[inline(always)]
pub fn any(p: bool) -> bool {
    let r: u32;
    // SAFETY: all 32 lanes are active where this is called (full-warp code
    // paths). Not `pure`, for the reason `shfl_xor_f32` gives.
    unsafe {
        core::arch::asm!(
            "{{ .reg .pred p, q; setp.ne.u32 p, {v}, 0; vote.sync.any.pred q, p, 0xffffffff; selp.u32 {r}, 1, 0, q; }}",
            r = out(reg32) r, v = in(reg32) p as u32,
            options(nomem, nostack)
        );
    }
    r != 0
}

/// `bar.warp.sync` over the full warp.
#[inline(always)]
pub fn sync_warp() {
    // SAFETY: all 32 lanes reach this (full-warp code paths only).
    unsafe { core::arch::asm!("bar.warp.sync 0xffffffff;", options(nostack)) }
}
