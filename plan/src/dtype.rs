//! The element types a launch may bind to a plan's element classes ([`crate::ElemClass`]), and
//! their vocabulary: names, sizes, float-ness, which are data types and which accumulator a
//! reduction over each uses.
//!
//! This is the one definition every executor and lowering shares: the host runtime re-exports
//! [`DType`] as its own, and the Ascend C lowering's (smaller) set of kernel types asks it for
//! every property the two have in common. Conversions and reductions themselves are the
//! executors' business.
//!
//! ```
//! use symsched_plan::DType;
//! let d = DType::parse("bfloat16").unwrap();
//! assert_eq!((d, d.size(), d.accumulator()), (DType::Bf16, 2, DType::F32));
//! assert_eq!(d.to_string(), "bf16");
//! assert!(DType::parse("f31").is_err());
//! ```

use std::fmt;
use std::str::FromStr;

/// A name that is not in the vocabulary (`what` says which one: `dtype`, `reduce op`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} `{name}`")]
pub struct UnknownName {
    pub what: &'static str,
    pub name: String,
}

/// A concrete element type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    F64,
    F16,
    Bf16,
    I32,
    I64,
    U8,
    /// fp8 with 4 exponent bits, 3 mantissa bits, no infinities (wire format only).
    F8E4M3,
    /// fp8 with 5 exponent bits, 2 mantissa bits (wire format only).
    F8E5M2,
}

impl DType {
    /// Every dtype, data types first. The position in this list is the dtype's code where one
    /// travels between ranks (e.g. the eager alltoallv header), so entries are only appended.
    pub const ALL: [DType; 9] = [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::Bf16,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::F8E4M3,
        DType::F8E5M2,
    ];

    /// Parse the names used on the command line, in launch requests and in Python (`f32`,
    /// `float32`, `bf16`, `fp8_e4m3`, …; case-insensitive).
    pub fn parse(name: &str) -> Result<DType, UnknownName> {
        Ok(match name.to_ascii_lowercase().as_str() {
            "f32" | "float32" | "float" => DType::F32,
            "f64" | "float64" | "double" => DType::F64,
            "f16" | "float16" | "half" | "fp16" => DType::F16,
            "bf16" | "bfloat16" => DType::Bf16,
            "i32" | "int32" | "int" => DType::I32,
            "i64" | "int64" | "long" => DType::I64,
            "u8" | "uint8" => DType::U8,
            "e4m3" | "fp8_e4m3" | "f8e4m3" | "float8_e4m3fn" | "e4m3fn" | "fp8" => DType::F8E4M3,
            "e5m2" | "fp8_e5m2" | "f8e5m2" | "float8_e5m2" => DType::F8E5M2,
            _ => {
                return Err(UnknownName {
                    what: "dtype",
                    name: name.to_string(),
                })
            }
        })
    }

    /// Short name (`f32`, `bf16`, `e4m3`, …).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::F16 => "f16",
            DType::Bf16 => "bf16",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::U8 => "u8",
            DType::F8E4M3 => "e4m3",
            DType::F8E5M2 => "e5m2",
        }
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::F64 | DType::I64 => 8,
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::Bf16 => 2,
            DType::U8 | DType::F8E4M3 | DType::F8E5M2 => 1,
        }
    }

    pub fn is_float(self) -> bool {
        !matches!(self, DType::I32 | DType::I64 | DType::U8)
    }

    /// Whether users may hold tensors of this type (fp8 is a wire format only).
    pub fn is_data(self) -> bool {
        !matches!(self, DType::F8E4M3 | DType::F8E5M2)
    }

    /// The accumulator for reductions over this data type: f32 for every 16- and 8-bit float,
    /// otherwise the type itself.
    pub fn accumulator(self) -> DType {
        match self {
            DType::F16 | DType::Bf16 | DType::F8E4M3 | DType::F8E5M2 => DType::F32,
            d => d,
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for DType {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, UnknownName> {
        DType::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for d in DType::ALL {
            assert_eq!(DType::parse(d.name()), Ok(d));
            assert_eq!(d.to_string().to_uppercase().parse::<DType>(), Ok(d));
        }
        let e = DType::parse("f31").unwrap_err();
        assert_eq!(e.to_string(), "unknown dtype `f31`");
    }

    #[test]
    fn accumulators_are_data_types_of_at_least_the_same_size() {
        for d in DType::ALL {
            let acc = d.accumulator();
            assert!(acc.is_data() && acc.size() >= d.size(), "{d} -> {acc}");
            assert_eq!(acc.is_float(), d.is_float(), "{d}");
        }
    }
}
