//! Thread-block clusters (sm_90): the cluster barrier and loads from another
//! block's shared memory (distributed shared memory).

/// `barrier.cluster.arrive` + `barrier.cluster.wait`: every non-exited
/// thread of the cluster arrives before any continues. Arrive releases this
/// thread's earlier writes and wait acquires the others' (the default
/// semantics), so shared-memory rows written before it are visible to every
/// block of the cluster after it.
#[inline(always)]
pub fn sync() {
    // SAFETY: a barrier has no memory-safety preconditions; reaching it from
    // every live thread of the cluster is the caller's control-flow
    // obligation (a deadlock, not UB).
    unsafe { core::arch::asm!("barrier.cluster.arrive;", "barrier.cluster.wait;", options(nostack)) };
}

/// `mapa.shared::cluster.u32`: the cluster-window address of `addr` (a
/// `.shared` address of this block) in block `rank` of the cluster.
#[inline(always)]
pub fn map_shared(addr: u32, rank: u32) -> u32 {
    let r: u32;
    // SAFETY: address arithmetic only.
    unsafe {
        core::arch::asm!("mapa.shared::cluster.u32 {r}, {a}, {k};", r = out(reg32) r, a = in(reg32) addr, k = in(reg32) rank,
            options(pure, nomem, nostack))
    };
    r
}

/// `ld.shared::cluster.v2.f32`.
///
/// # Safety
/// `addr` must come from [`map_shared`] for an 8-byte aligned address inside
/// the shared memory of a block of the cluster that has not exited.
#[inline(always)]
pub unsafe fn ld_v2_f32(addr: u32) -> [f32; 2] {
    let (x, y): (f32, f32);
    core::arch::asm!("ld.shared::cluster.v2.f32 {{{x}, {y}}}, [{a}];", a = in(reg32) addr, x = out(reg32) x, y = out(reg32) y,
        options(readonly, nostack));
    [x, y]
}

/// `ld.shared::cluster.v4.f32`.
///
/// # Safety
/// As [`ld_v2_f32`], for a 16-byte aligned address.
#[inline(always)]
pub unsafe fn ld_v4_f32(addr: u32) -> [f32; 4] {
    let (x, y, z, w): (f32, f32, f32, f32);
    core::arch::asm!("ld.shared::cluster.v4.f32 {{{x}, {y}, {z}, {w}}}, [{a}];", a = in(reg32) addr,
        x = out(reg32) x, y = out(reg32) y, z = out(reg32) z, w = out(reg32) w, options(readonly, nostack));
    [x, y, z, w]
}
