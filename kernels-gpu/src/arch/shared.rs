//! Dynamic shared memory and `.shared` loads/stores.

/// `.shared` window address of the block's dynamic shared memory (sized at
/// launch; 16-byte aligned because it is requested as `[u32; 4]`).
#[inline(always)]
pub fn dynamic_smem_base() -> u32 {
    let generic = core::intrinsics::gpu::gpu_launch_sized_workgroup_mem::<[u32; 4]>();
    let r: u32;
    // SAFETY: converts a generic pointer that points into shared memory.
    unsafe {
        core::arch::asm!(
            "{{ .reg .u64 t; cvta.to.shared.u64 t, {g}; cvt.u32.u64 {r}, t; }}",
            r = out(reg32) r, g = in(reg64) generic as u64,
            options(pure, nomem, nostack)
        );
    }
    r
}

/// `st.shared.f32`.
///
/// # Safety
/// `addr` must be a 4-byte aligned address inside the block's shared memory.
#[inline(always)]
pub unsafe fn st_shared_f32(addr: u32, v: f32) {
    core::arch::asm!("st.shared.f32 [{a}], {v};", a = in(reg32) addr, v = in(reg32) v, options(nostack));
}

/// `ld.shared.f32`.
///
/// # Safety
/// `addr` must be a 4-byte aligned address inside the block's shared memory.
#[inline(always)]
pub unsafe fn ld_shared_f32(addr: u32) -> f32 {
    let r: f32;
    core::arch::asm!("ld.shared.f32 {r}, [{a}];", r = out(reg32) r, a = in(reg32) addr,
        options(readonly, nostack));
    r
}

/// `st.shared.v2.f32`.
///
/// # Safety
/// `addr` must be an 8-byte aligned address inside the block's shared memory.
#[inline(always)]
pub unsafe fn st_shared_v2_f32(addr: u32, v: [f32; 2]) {
    core::arch::asm!("st.shared.v2.f32 [{a}], {{{x}, {y}}};", a = in(reg32) addr,
        x = in(reg32) v[0], y = in(reg32) v[1], options(nostack));
}

/// `ld.shared.v2.f32`.
///
/// # Safety
/// `addr` must be an 8-byte aligned address inside the block's shared memory.
#[inline(always)]
pub unsafe fn ld_shared_v2_f32(addr: u32) -> [f32; 2] {
    let (x, y): (f32, f32);
    core::arch::asm!("ld.shared.v2.f32 {{{x}, {y}}}, [{a}];", a = in(reg32) addr,
        x = out(reg32) x, y = out(reg32) y, options(readonly, nostack));
    [x, y]
}

/// `ld.shared.v4.f32`.
///
/// # Safety
/// `addr` must be a 16-byte aligned address inside the block's shared memory.
#[inline(always)]
pub unsafe fn ld_shared_v4_f32(addr: u32) -> [f32; 4] {
    let (x, y, z, w): (f32, f32, f32, f32);
    core::arch::asm!("ld.shared.v4.f32 {{{x}, {y}, {z}, {w}}}, [{a}];", a = in(reg32) addr,
        x = out(reg32) x, y = out(reg32) y, z = out(reg32) z, w = out(reg32) w,
        options(readonly, nostack));
    [x, y, z, w]
}

/// `ld.shared.b32`.
///
/// # Safety
/// `addr` must be a 4-byte aligned shared address of the block.
#[inline(always)]
pub unsafe fn ld_shared_u32(addr: u32) -> u32 {
    let v: u32;
    core::arch::asm!("ld.shared.b32 {v}, [{a}];", v = out(reg32) v, a = in(reg32) addr, options(readonly, nostack));
    v
}

/// `st.shared.v4.f32`.
///
/// # Safety
/// `addr` must be a 16-byte aligned shared address of the block.
#[inline(always)]
pub unsafe fn st_shared_v4_f32(addr: u32, v: [f32; 4]) {
    core::arch::asm!("st.shared.v4.f32 [{a}], {{{x}, {y}, {z}, {w}}};", a = in(reg32) addr,
        x = in(reg32) v[0], y = in(reg32) v[1], z = in(reg32) v[2], w = in(reg32) v[3], options(nostack));
}

/// `st.shared.b16` (the low half of `v`).
///
/// # Safety
/// `addr` must be a 2-byte aligned shared address of the block.
#[inline(always)]
pub unsafe fn st_shared_u16(addr: u32, v: u32) {
    core::arch::asm!("{{ .reg .b16 h; cvt.u16.u32 h, {v}; st.shared.b16 [{a}], h; }}", a = in(reg32) addr, v = in(reg32) v, options(nostack));
}

/// `ld.shared.v2.b32`.
///
/// # Safety
/// `addr` must be an 8-byte aligned address inside the block's shared memory.
#[inline(always)]
pub unsafe fn ld_shared_v2_u32(addr: u32) -> [u32; 2] {
    let (x, y): (u32, u32);
    core::arch::asm!("ld.shared.v2.b32 {{{x}, {y}}}, [{a}];", a = in(reg32) addr,
        x = out(reg32) x, y = out(reg32) y, options(readonly, nostack));
    [x, y]
}

/// `st.shared.b32`.
///
/// # Safety
/// `addr` must be a 4-byte aligned shared address of the block.
#[inline(always)]
pub unsafe fn st_shared_u32(addr: u32, v: u32) {
    core::arch::asm!("st.shared.b32 [{a}], {v};", a = in(reg32) addr, v = in(reg32) v, options(nostack));
}

/// `ld.acquire.cta.shared.b32`: a word another thread of the block
/// published with [`st_release_u32`]; what that thread did before the
/// store is visible to this one after the load (a loop may spin on it: the
/// load is never hoisted).
///
/// # Safety
/// `addr` must be a 4-byte aligned shared address of the block.
#[inline(always)]
pub unsafe fn ld_acquire_u32(addr: u32) -> u32 {
    let v: u32;
    core::arch::asm!("ld.acquire.cta.shared.b32 {v}, [{a}];", v = out(reg32) v, a = in(reg32) addr, options(nostack));
    v
}

/// `st.release.cta.shared.b32`: publishes `v` after everything this thread
/// did before ([`ld_acquire_u32`]).
///
/// # Safety
/// `addr` must be a 4-byte aligned shared address of the block.
#[inline(always)]
pub unsafe fn st_release_u32(addr: u32, v: u32) {
    core::arch::asm!("st.release.cta.shared.b32 [{a}], {v};", a = in(reg32) addr, v = in(reg32) v, options(nostack));
}

/// `ld.shared.v4.b32`.
///
/// # Safety
/// `addr` must be a 16-byte aligned shared address of the block.
#[inline(always)]
pub unsafe fn ld_shared_v4_u32(addr: u32) -> [u32; 4] {
    let (x, y, z, w): (u32, u32, u32, u32);
    core::arch::asm!("ld.shared.v4.b32 {{{x}, {y}, {z}, {w}}}, [{a}];", a = in(reg32) addr,
        x = out(reg32) x, y = out(reg32) y, z = out(reg32) z, w = out(reg32) w, options(readonly, nostack));
    [x, y, z, w]
}

/// `st.shared.v4.b32`.
///
/// # Safety
/// `addr` must be a 16-byte aligned shared address of the block.
#[inline(always)]
pub unsafe fn st_shared_v4_u32(addr: u32, v: [u32; 4]) {
    core::arch::asm!("st.shared.v4.b32 [{a}], {{{x}, {y}, {z}, {w}}};", a = in(reg32) addr,
        x = in(reg32) v[0], y = in(reg32) v[1], z = in(reg32) v[2], w = in(reg32) v[3], options(nostack));
}

/// `fence.proxy.async.shared::cta`: makes this thread's ordinary stores to
/// shared memory visible to the async proxy (the tensor cores' `wgmma`
/// operand reads) once a barrier orders the two; every thread that wrote
/// calls it before that barrier.
#[inline(always)]
pub fn fence_proxy_async_shared() {
    // SAFETY: a fence has no operands; not `nomem`, so stores stay before it.
    unsafe { core::arch::asm!("fence.proxy.async.shared::cta;", options(nostack, preserves_flags)) }
}
