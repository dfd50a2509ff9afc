//! Thread and block indices, barriers.
use core::arch::nvptx;

#[inline(always)]
pub fn thread_idx_x() -> u32 {
    // SAFETY: reads a special register; always valid inside a kernel.
    unsafe { nvptx::_thread_idx_x() as u32 }
}
#[inline(always)]
pub fn block_dim_x() -> u32 {
    // SAFETY: as above.
    unsafe { nvptx::_block_dim_x() as u32 }
}
#[inline(always)]
pub fn block_idx_x() -> u32 {
    // SAFETY: as above.
    unsafe { nvptx::_block_idx_x() as u32 }
}
/// `%ctaid.x` read afresh at each call (an asm statement the optimizer
/// neither merges nor hoists): a value derived from it is recomputed where
/// it is used instead of held in a register across the key loop, as ptxas
/// does for a plain special-register read but not for arithmetic on one.
#[inline(always)]
pub fn block_idx_x_fresh() -> u32 {
    let r: u32;
    // SAFETY: reads a special register.
    unsafe { core::arch::asm!("mov.u32 {r}, %ctaid.x;", r = out(reg32) r, options(nomem, nostack, preserves_flags)) };
    r
}
/// `x`, through a `mov` the optimizer treats as a side effect: what is
/// computed from the result is computed again at each call instead of
/// once and held in registers across a loop (as [`block_idx_x_fresh`]).
#[inline(always)]
pub fn opaque(x: u32) -> u32 {
    let r: u32;
    // SAFETY: a register move.
    unsafe { core::arch::asm!("mov.u32 {r}, {x};", r = out(reg32) r, x = in(reg32) x, options(nomem, nostack, preserves_flags)) };
    r
}

#[inline(always)]
pub fn block_idx_y() -> u32 {
    // SAFETY: as above.
    unsafe { nvptx::_block_idx_y() as u32 }
}
#[inline(always)]
pub fn block_idx_z() -> u32 {
    // SAFETY: as above.
    unsafe { nvptx::_block_idx_z() as u32 }
}
#[inline(always)]
pub fn lane_id() -> u32 {
    thread_idx_x() % 32
}
#[inline(always)]
pub fn warp_id() -> u32 {
    thread_idx_x() / 32
}

/// `bar.sync 0`: every thread of the block must reach it (callers keep it
/// out of divergent code).
#[inline(always)]
pub fn sync_threads() {
    // SAFETY: a barrier has no memory-safety preconditions; reaching it from
    // all threads is the caller's control-flow obligation (a deadlock, not UB).
    unsafe { nvptx::_syncthreads() }
}

/// `bar.sync ID, COUNT`: a named barrier of the `COUNT` threads (a multiple
/// of 32, whole warps) that use barrier `ID` (1..16; 0 is
/// [`sync_threads`]'s) — a warpgroup's 128, say. Every one of them must
/// reach it.
#[inline(always)]
pub fn sync_named(id: u32, count: u32) {
    // SAFETY: as `sync_threads`; the memory clobber keeps shared accesses
    // on their side of it.
    unsafe { core::arch::asm!("bar.sync {i}, {n};", i = in(reg32) id, n = in(reg32) count, options(nostack)) }
}

/// `bar.arrive ID, COUNT`: this warp's arrival on named barrier `ID` of
/// `COUNT` threads, without waiting: the producer's half of a hand-over
/// whose consumers wait with [`sync_named`] (their arrivals and these
/// complete the barrier's phase).
#[inline(always)]
pub fn arrive_named(id: u32, count: u32) {
    // SAFETY: as `sync_named`.
    unsafe { core::arch::asm!("bar.arrive {i}, {n};", i = in(reg32) id, n = in(reg32) count, options(nostack)) }
}

/// Stops the kernel with an error (the launch reports `IllegalInstruction`).
#[inline(always)]
pub fn trap() -> ! {
    // SAFETY: `trap` aborts the grid.
    unsafe { nvptx::trap() }
}

#[inline(always)]
pub fn grid_dim_y() -> u32 {
    // SAFETY: reads a special register.
    unsafe { nvptx::_grid_dim_y() as u32 }
}

#[inline(always)]
pub fn grid_dim_z() -> u32 {
    // SAFETY: reads a special register.
    unsafe { nvptx::_grid_dim_z() as u32 }
}

#[inline(always)]
pub fn grid_dim_x() -> u32 {
    // SAFETY: reads a special register.
    unsafe { nvptx::_grid_dim_x() as u32 }
}

/// `mov.u64 %globaltimer`: the GPU's nanosecond clock (updated every ~µs).
#[inline(always)]
pub fn global_timer_ns() -> u64 {
    let t: u64;
    // SAFETY: reads a special register; not `pure`, so every call re-reads it.
    unsafe { core::arch::asm!("mov.u64 {t}, %globaltimer;", t = out(reg64) t, options(nostack)) };
    t
}

/// `griddepcontrol.launch_dependents` (sm_90): lets a kernel launched after
/// this one with programmatic stream serialization start its blocks once
/// every block of this grid has executed it or exited. Without such a
/// dependent it does nothing; below sm_90, which has no programmatic
/// launch (the host launches no dependent there), it is compiled out.
#[inline(always)]
pub fn launch_dependents() {
    // SAFETY: a scheduling hint; no memory or control-flow effect here.
    #[cfg(target_feature = "sm_90")]
    unsafe {
        core::arch::asm!("griddepcontrol.launch_dependents;", options(nomem, nostack, preserves_flags))
    };
}

/// `griddepcontrol.wait` (sm_90): waits until the grids this one depends on
/// have completed and their memory operations are visible. A no-op for a
/// grid launched without programmatic stream serialization. Not `nomem`:
/// loads of the prerequisite's results must not move above it. Below
/// sm_90 it is compiled out: the host launches every kernel there in plain
/// stream order (`Kernels::launch_overlapping` needs a specific target's
/// module), so the prerequisite has completed before this grid starts.
#[inline(always)]
pub fn wait_for_prerequisites() {
    // SAFETY: a wait; the memory clobber orders later loads after it.
    #[cfg(target_feature = "sm_90")]
    unsafe {
        core::arch::asm!("griddepcontrol.wait;", options(nostack, preserves_flags))
    };
}
