//! Tensor-core fragments: `ldmatrix` and `mma.sync.m16n8k16`.
//!
//! Fragment layouts (PTX ISA, "Matrix fragments for mma.m16n8k16"), with
//! `g = lane / 4`, `c = (lane % 4) * 2`:
//! - A (16×16, row): `a0 = A[g][c..c+2]`, `a1 = A[g+8][c..]`, `a2 = A[g][c+8..]`, `a3 = A[g+8][c+8..]`
//! - B (16×8, col):  `b0 = B[c..c+2][g]`, `b1 = B[c+8..c+10][g]`
//! - C/D (16×8 f32): `d0,d1 = D[g][c], D[g][c+1]`; `d2,d3 = D[g+8][c], D[g+8][c+1]`

/// `ldmatrix.sync.aligned.m8n8.x4.shared.b16`: lanes 8j..8j+7 give the row
/// addresses of matrix j; register j receives matrix j's fragment.
///
/// # Safety
/// Every lane's `addr` must be a 16-byte aligned shared address of the block
/// holding 16 readable bytes; all 32 lanes must execute it.
#[inline(always)]
pub unsafe fn ldmatrix_x4(addr: u32) -> [u32; 4] {
    let (a, b, c, d): (u32, u32, u32, u32);
    core::arch::asm!(
        "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {{{a}, {b}, {c}, {d}}}, [{p}];",
        a = out(reg32) a, b = out(reg32) b, c = out(reg32) c, d = out(reg32) d, p = in(reg32) addr,
        options(readonly, nostack)
    );
    [a, b, c, d]
}

/// `ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16`: as [`ldmatrix_x4`], each
/// 8×8 matrix transposed.
///
/// # Safety
/// As [`ldmatrix_x4`].
#[inline(always)]
pub unsafe fn ldmatrix_x4_trans(addr: u32) -> [u32; 4] {
    let (a, b, c, d): (u32, u32, u32, u32);
    core::arch::asm!(
        "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {{{a}, {b}, {c}, {d}}}, [{p}];",
        a = out(reg32) a, b = out(reg32) b, c = out(reg32) c, d = out(reg32) d, p = in(reg32) addr,
        options(readonly, nostack)
    );
    [a, b, c, d]
}

/// `ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16`: lanes 0..16 give the
/// row addresses of two matrices (lanes 16..32 are ignored), each transposed.
///
/// # Safety
/// As [`ldmatrix_x4`], for lanes 0..16.
#[inline(always)]
pub unsafe fn ldmatrix_x2_trans(addr: u32) -> [u32; 2] {
    let (a, b): (u32, u32);
    core::arch::asm!(
        "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {{{a}, {b}}}, [{p}];",
        a = out(reg32) a, b = out(reg32) b, p = in(reg32) addr,
        options(readonly, nostack)
    );
    [a, b]
}

/// `movmatrix.sync.aligned.m8n8.trans.b16`: the warp's 8×8 matrix of 16-bit
/// values, held as in an `ldmatrix` fragment (lane `l` has row `l / 4`,
/// columns `2(l % 4)`, `+1`), transposed in registers.
#[inline(always)]
pub fn movmatrix_trans(a: u32) -> u32 {
    let d: u32;
    // SAFETY: register-only; called by all 32 lanes of the warp.
    unsafe {
        core::arch::asm!(
            "movmatrix.sync.aligned.m8n8.trans.b16 {d}, {a};",
            d = out(reg32) d, a = in(reg32) a,
            // Not `pure`: a warp-collective (see `mma_m16n8k16`).
            options(nomem, nostack)
        );
    }
    d
}

macro_rules! mma_m16n8k16 {
    ($name:ident, $ty:literal) => {
        /// `mma.sync.aligned.m16n8k16.row.col.f32` with 16-bit inputs: `d = a·b + c`.
        #[inline(always)]
        pub fn $name(a: [u32; 4], b: [u32; 2], c: [f32; 4]) -> [f32; 4] {
            let (d0, d1, d2, d3): (f32, f32, f32, f32);
            // SAFETY: register-only; called by all 32 lanes of the warp.
            unsafe {
                core::arch::asm!(
                    concat!("mma.sync.aligned.m16n8k16.row.col.f32.", $ty, ".", $ty, ".f32 ",
                        "{{{d0}, {d1}, {d2}, {d3}}}, {{{a0}, {a1}, {a2}, {a3}}}, {{{b0}, {b1}}}, ",
                        "{{{c0}, {c1}, {c2}, {c3}}};"),
                    d0 = out(reg32) d0, d1 = out(reg32) d1, d2 = out(reg32) d2, d3 = out(reg32) d3,
                    a0 = in(reg32) a[0], a1 = in(reg32) a[1], a2 = in(reg32) a[2], a3 = in(reg32) a[3],
                    b0 = in(reg32) b[0], b1 = in(reg32) b[1],
                    c0 = in(reg32) c[0], c1 = in(reg32) c[1], c2 = in(reg32) c[2], c3 = in(reg32) c[3],
                    // Not `pure`: a warp-collective must not be moved into
                    // lane-divergent code (see `arch/mod.rs`).
                    options(nomem, nostack)
                );
            }
            [d0, d1, d2, d3]
        }
    };
}
mma_m16n8k16!(mma_bf16_m16n8k16, "bf16");
mma_m16n8k16!(mma_f16_m16n8k16, "f16");
