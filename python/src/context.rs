//! The device's primary context: the one PyTorch's runtime uses. Retained
//! (never created) for as long as a `_Device` lives, and made current only
//! for the length of one library call, the caller's context restored after.

use cust_raw as cuda;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

pub(crate) struct PrimaryContext {
    ctx: cuda::CUcontext,
    device: cuda::CUdevice,
    pub(crate) ordinal: i32,
}

// SAFETY: a context handle is valid from any thread; it is only made
// current, never destroyed, while the struct lives.
unsafe impl Send for PrimaryContext {}
unsafe impl Sync for PrimaryContext {}

/// The driver's name for a status code.
fn status_name(code: cuda::CUresult) -> String {
    let mut name: *const std::ffi::c_char = std::ptr::null();
    // SAFETY: the driver writes a pointer to a static string, or nothing.
    unsafe { cuda::cuGetErrorName(code, &mut name) };
    if name.is_null() {
        format!("CUresult {}", code as u32)
    } else {
        // SAFETY: a NUL-terminated static string.
        unsafe { std::ffi::CStr::from_ptr(name) }.to_string_lossy().into_owned()
    }
}

/// `RuntimeError` for a failed driver call.
pub(crate) fn cuda_error(call: &str, code: cuda::CUresult) -> PyErr {
    PyRuntimeError::new_err(format!("decode_attn: {call} failed: {}", status_name(code)))
}

fn check(call: &str, code: cuda::CUresult) -> PyResult<()> {
    if code == cuda::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(cuda_error(call, code))
    }
}

/// Whether the loaded `libcuda.so.1` is the package's stand-in
/// (`decode_attn/_driver.py` loads it only where the driver is missing).
fn driver_is_stand_in() -> bool {
    let mut text: *const std::ffi::c_char = std::ptr::null();
    // SAFETY: the driver writes a pointer to a static string, or nothing.
    unsafe { cuda::cuGetErrorString(cuda::CUresult::CUDA_ERROR_NO_DEVICE, &mut text) };
    // SAFETY: a NUL-terminated static string.
    !text.is_null() && unsafe { std::ffi::CStr::from_ptr(text) }.to_string_lossy().contains("libcuda stub")
}

/// Initializes the driver, or says clearly why there is no GPU to use.
fn init() -> PyResult<()> {
    // SAFETY: plain driver initialization, idempotent.
    let code = unsafe { cuda::cuInit(0) };
    if code == cuda::CUresult::CUDA_SUCCESS {
        return Ok(());
    }
    let why = if driver_is_stand_in() {
        "no NVIDIA driver (libcuda.so.1) was found on this machine".to_owned()
    } else {
        format!("the NVIDIA driver found no usable GPU ({})", status_name(code))
    };
    Err(PyRuntimeError::new_err(format!("decode_attn needs an NVIDIA GPU (compute capability 9.0, Hopper): {why}")))
}

/// Devices the driver sees (0 where there is no driver or no GPU).
#[pyfunction]
pub(crate) fn device_count() -> i32 {
    if init().is_err() {
        return 0;
    }
    initialized_device_count()
}

fn initialized_device_count() -> i32 {
    let mut n = 0;
    // SAFETY: writes one int.
    let code = unsafe { cuda::cuDeviceGetCount(&mut n) };
    if code == cuda::CUresult::CUDA_SUCCESS {
        n
    } else {
        0
    }
}

impl PrimaryContext {
    pub(crate) fn retain(ordinal: i32) -> PyResult<Self> {
        init()?;
        let count = initialized_device_count();
        if ordinal < 0 || ordinal >= count {
            return Err(PyValueError::new_err(format!("invalid `device`: expected a CUDA device index in 0..{count}, got {ordinal}")));
        }
        let mut device = 0;
        let mut ctx = std::ptr::null_mut();
        // SAFETY: out-parameters of the driver.
        unsafe {
            check("cuDeviceGet", cuda::cuDeviceGet(&mut device, ordinal))?;
            check("cuDevicePrimaryCtxRetain", cuda::cuDevicePrimaryCtxRetain(&mut ctx, device))?;
        }
        Ok(PrimaryContext { ctx, device, ordinal })
    }

    /// Runs `f` with this context current on the calling thread, then
    /// restores whatever was current before (PyTorch's, or none).
    pub(crate) fn with_current<T>(&self, f: impl FnOnce() -> decode_attn::Result<T>) -> decode_attn::Result<T> {
        let mut previous = std::ptr::null_mut();
        // SAFETY: reads and sets the thread's current context to a retained one.
        unsafe {
            cuda::cuCtxGetCurrent(&mut previous);
            if previous != self.ctx {
                let code = cuda::cuCtxSetCurrent(self.ctx);
                if code != cuda::CUresult::CUDA_SUCCESS {
                    return Err(decode_attn::Error::Driver { call: "cuCtxSetCurrent", code: code as u32 });
                }
            }
        }
        let result = f();
        if previous != self.ctx {
            // SAFETY: `previous` was current on this thread a moment ago.
            unsafe { cuda::cuCtxSetCurrent(previous) };
        }
        result
    }
}

impl Drop for PrimaryContext {
    fn drop(&mut self) {
        // SAFETY: releases the reference `retain` took.
        unsafe { cuda::cuDevicePrimaryCtxRelease_v2(self.device) };
    }
}
