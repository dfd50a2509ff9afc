//! Errors. Every rejected input names the parameter and what was expected.

use std::fmt;

#[derive(Debug, Clone, PartialEq)]
pub enum Error {
    /// A shape, length, stride, pointer, dtype or buffer did not fit.
    InvalidArgument {
        /// The parameter, as named in the API (`num_q_heads`, `k`, `seq_lens[3]`, …).
        param: String,
        expected: String,
        got: String,
    },
    /// No kernel is compiled for this combination.
    Unsupported(String),
    /// The CUDA driver reported an error (through `cust`): its `CUresult`
    /// code and the driver's description.
    Cuda { code: u32, message: String },
    /// A raw driver call failed with this `CUresult` code.
    Driver { call: &'static str, code: u32 },
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub(crate) fn invalid(param: impl Into<String>, expected: impl Into<String>, got: impl fmt::Display) -> Error {
        Error::InvalidArgument { param: param.into(), expected: expected.into(), got: got.to_string() }
    }

    /// The parameter an `InvalidArgument` names.
    pub fn param(&self) -> Option<&str> {
        match self {
            Error::InvalidArgument { param, .. } => Some(param),
            _ => None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidArgument { param, expected, got } => {
                write!(f, "invalid `{param}`: expected {expected}, got {got}")
            }
            Error::Unsupported(what) => write!(f, "unsupported: {what}"),
            Error::Cuda { code, message } => write!(f, "CUDA error {code}: {message}"),
            Error::Driver { call, code } => write!(f, "CUDA driver call {call} failed with CUresult {code}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<cust::error::CudaError> for Error {
    fn from(e: cust::error::CudaError) -> Self {
        Error::Cuda { code: e as u32, message: e.to_string() }
    }
}

/// `Err(InvalidArgument)` unless `ok`.
pub(crate) fn ensure(ok: bool, param: impl Into<String>, expected: impl Into<String>, got: impl fmt::Display) -> Result<()> {
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(param, expected, got))
    }
}
