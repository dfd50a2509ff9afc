//! A CUDA context for the GPU tests and the benchmark, or why there is none.
#![allow(dead_code)]

/// A CUDA context on device `ordinal`, or why there is none.
pub fn init_cuda(ordinal: u32) -> std::result::Result<decode_attn::cust::context::Context, String> {
    use decode_attn::cust;
    cust::init(cust::CudaFlags::empty()).map_err(|e| format!("no CUDA driver/device ({e})"))?;
    let n = cust::device::Device::num_devices().map_err(|e| format!("{e}"))?;
    if n == 0 {
        return Err("no CUDA device found".into());
    }
    if ordinal >= n {
        return Err(format!("device {ordinal} requested, {n} present"));
    }
    let dev = cust::device::Device::get_device(ordinal).map_err(|e| format!("{e}"))?;
    cust::context::Context::new(dev).map_err(|e| format!("creating a context: {e}"))
}
