//! Element types and reduce ops a kernel is generated for: the lowerable subset of the plan's
//! dtypes ([`symsched_plan::DType`]) and the plan's reduce ops themselves
//! ([`symsched_plan::ReduceOp`]), with the Ascend C spellings and codes of each. Everything
//! the two share (names, sizes, float-ness, the accumulator, parsing) is asked of the plan
//! rather than restated here.

use std::fmt;
use std::str::FromStr;
use symsched_plan::DType as PlanDType;

/// Concrete element type of a buffer class at launch.
///
/// `E4m3`/`E5m2` are fp8 wire formats only (as in the runtime); integers travel as themselves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    F16,
    Bf16,
    F64,
    I32,
    I64,
    /// fp8 with 4 exponent and 3 mantissa bits, no infinities (OCP `e4m3fn`).
    E4m3,
    /// fp8 with 5 exponent and 2 mantissa bits.
    E5m2,
}

impl DType {
    /// Every dtype, data types first.
    pub const ALL: [DType; 8] = [
        DType::F32,
        DType::F16,
        DType::Bf16,
        DType::F64,
        DType::I32,
        DType::I64,
        DType::E4m3,
        DType::E5m2,
    ];

    /// The types users hold tensors of (every type but the fp8 wire formats).
    pub const DATA: [DType; 6] = [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::Bf16,
        DType::I32,
        DType::I64,
    ];

    /// The plan's element type this kernel type stands for (the kernel's set is the lowerable
    /// subset of the plan's: no u8).
    pub fn plan_dtype(self) -> PlanDType {
        match self {
            DType::F32 => PlanDType::F32,
            DType::F16 => PlanDType::F16,
            DType::Bf16 => PlanDType::Bf16,
            DType::F64 => PlanDType::F64,
            DType::I32 => PlanDType::I32,
            DType::I64 => PlanDType::I64,
            DType::E4m3 => PlanDType::F8E4M3,
            DType::E5m2 => PlanDType::F8E5M2,
        }
    }

    /// The kernel type standing for the plan's `d`, if it is lowerable.
    pub fn from_plan(d: PlanDType) -> Option<DType> {
        DType::ALL.into_iter().find(|k| k.plan_dtype() == d)
    }

    /// Bytes per element.
    pub fn size(self) -> u64 {
        self.plan_dtype().size() as u64
    }

    /// Ascend C spelling of the storage type. The fp8 formats are raw bytes: the Atlas A2
    /// vector unit the lowering targets has no fp8 type (`fp8_e4m3fn_t`/`fp8_e5m2_t` exist
    /// only for Ascend 950), see docs/ascendc.md, "fp8 wire formats".
    pub fn c_type(self) -> &'static str {
        match self {
            DType::F32 => "float",
            DType::F16 => "half",
            DType::Bf16 => "bfloat16_t",
            DType::F64 => "double",
            DType::I32 => "int32_t",
            DType::I64 => "int64_t",
            DType::E4m3 | DType::E5m2 => "uint8_t",
        }
    }

    /// The `NAME` in the typed shmem calls (`aclshmem_NAME_put_nbi`).
    pub fn shmem_name(self) -> &'static str {
        match self {
            DType::F32 => "float",
            DType::F16 => "half",
            DType::Bf16 => "bfloat16",
            DType::F64 => "double",
            DType::I32 => "int32",
            DType::I64 => "int64",
            DType::E4m3 | DType::E5m2 => "uint8",
        }
    }

    /// Short name used in kernel names and the CLI (the plan's names).
    pub fn name(self) -> &'static str {
        self.plan_dtype().name()
    }

    /// Numbering shared with the generated `TypeIdOf`.
    pub fn id(self) -> u32 {
        match self {
            DType::F32 => 0,
            DType::F16 => 1,
            DType::Bf16 => 2,
            DType::F64 => 3,
            DType::I32 => 4,
            DType::I64 => 5,
            DType::E4m3 => 6,
            DType::E5m2 => 7,
        }
    }

    /// The generated kernel's fp8 format code: 0 not fp8, 1 e4m3, 2 e5m2.
    pub fn fp8_code(self) -> u32 {
        match self {
            DType::E4m3 => 1,
            DType::E5m2 => 2,
            _ => 0,
        }
    }

    pub fn is_float(self) -> bool {
        self.plan_dtype().is_float()
    }

    /// Whether users may hold tensors of this type (fp8 is a wire format only).
    pub fn is_data(self) -> bool {
        self.plan_dtype().is_data()
    }

    /// The accumulator of reductions over this data type: the plan's (f32 for 16- and 8-bit
    /// floats, else the type itself), which is always a kernel type too.
    pub fn accumulator(self) -> DType {
        DType::from_plan(self.plan_dtype().accumulator()).unwrap_or(self)
    }

    /// Whether `self` (a data type) may travel as `wire` in a kernel: integers travel as
    /// themselves; f32/f16/bf16 as any float; f64 only as itself (the lowering has no
    /// single-rounding f64 -> narrow conversion on the A2 vector unit, see docs/ascendc.md).
    pub fn can_travel_as(self, wire: DType) -> bool {
        match self {
            DType::F32 | DType::F16 | DType::Bf16 => wire.is_float() && wire != DType::F64,
            _ => wire == self,
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for DType {
    type Err = String;
    /// The plan's names ([`PlanDType::parse`]) of the lowerable types.
    fn from_str(s: &str) -> Result<Self, String> {
        PlanDType::parse(s)
            .ok()
            .and_then(DType::from_plan)
            .ok_or_else(|| {
                format!(
                    "unknown dtype `{s}` (expected f32, f64, f16, bf16, i32, i64, e4m3 or e5m2)"
                )
            })
    }
}

/// The launch's reduce op: the plan's ([`symsched_plan::ReduceOp`]); what the Ascend C lowering
/// needs of it beyond the shared vocabulary is [`KernelOp`].
pub use symsched_plan::ReduceOp;

/// The Ascend C side of a reduce op.
pub trait KernelOp: Copy {
    /// The Ascend C vector call that folds two tiles (`avg` folds as `sum`).
    fn ascend_call(self) -> &'static str;
    /// The generated kernel's fold code: 0 sum (and avg), 1 max, 2 min.
    fn fold_code(self) -> u32;
    /// The fold on f32 accumulator values, exactly as the simulated vector unit does it.
    fn apply(self, a: f32, b: f32) -> f32;
}

impl KernelOp for ReduceOp {
    fn ascend_call(self) -> &'static str {
        match self {
            ReduceOp::Sum | ReduceOp::Avg => "AscendC::Add",
            ReduceOp::Max => "AscendC::Max",
            ReduceOp::Min => "AscendC::Min",
        }
    }

    fn fold_code(self) -> u32 {
        match self {
            ReduceOp::Sum | ReduceOp::Avg => 0,
            ReduceOp::Max => 1,
            ReduceOp::Min => 2,
        }
    }

    fn apply(self, a: f32, b: f32) -> f32 {
        match self {
            ReduceOp::Sum | ReduceOp::Avg => a + b,
            ReduceOp::Max => {
                if b > a {
                    b
                } else {
                    a
                }
            }
            ReduceOp::Min => {
                if b < a {
                    b
                } else {
                    a
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_match_the_plan() {
        for d in DType::ALL {
            assert_eq!(d.name().parse::<DType>().unwrap(), d);
            assert_eq!(DType::from_plan(d.plan_dtype()), Some(d));
        }
        assert!("u8".parse::<DType>().is_err(), "u8 is not lowerable");
        let codes: Vec<u32> = ReduceOp::ALL.iter().map(|op| op.fold_code()).collect();
        assert_eq!(codes, [0, 0, 1, 2], "avg folds as sum");
    }

    #[test]
    fn wire_rules_are_no_looser_than_the_runtime() {
        use symsched_runtime::exec as rt;
        for d in DType::DATA {
            for w in DType::ALL {
                if d.can_travel_as(w) {
                    assert!(
                        rt::ElemTypes::new(d.plan_dtype(), Some(w.plan_dtype())).is_ok(),
                        "{d} as {w}"
                    );
                }
            }
        }
    }
}
