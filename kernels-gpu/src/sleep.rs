//! A kernel that keeps the GPU busy for a given time. Benchmarks enqueue it
//! ahead of their timed launches so those start back to back on the device
//! instead of waiting on the host that enqueues them.

use decode_attn_abi::SleepParams;

use crate::arch::thread;

/// # Safety
/// None beyond launching it (one thread suffices; it touches no memory).
#[inline(always)]
pub unsafe fn sleep(p: &SleepParams) {
    let start = thread::global_timer_ns();
    while thread::global_timer_ns().wrapping_sub(start) < p.ns {}
}
