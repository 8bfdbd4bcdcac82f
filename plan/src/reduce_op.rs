//! The reduce op a launch binds to a plan's `reduce` steps: its names and meaning.
//!
//! Every executor folds `dst = ((s0 ⊕ s1) ⊕ s2) ⊕ …` left to right in the accumulator type;
//! `avg` folds as `sum` and divides once by the group size over every written output.
//!
//! ```
//! use symsched_plan::ReduceOp;
//! assert_eq!(ReduceOp::parse("MEAN"), Ok(ReduceOp::Avg));
//! assert_eq!(ReduceOp::Max.to_string(), "max");
//! ```

use crate::dtype::UnknownName;
use std::fmt;
use std::str::FromStr;

/// The launch's reduce op.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    Sum,
    /// `sum`, then one division by the group size over every written output, in the
    /// accumulator type (integers truncate toward zero).
    Avg,
    Max,
    Min,
}

impl ReduceOp {
    pub const ALL: [ReduceOp; 4] = [ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min];

    /// Parse `sum`, `avg` (or `mean`), `max`, `min` (case-insensitive).
    pub fn parse(name: &str) -> Result<ReduceOp, UnknownName> {
        Ok(match name.to_ascii_lowercase().as_str() {
            "sum" => ReduceOp::Sum,
            "avg" | "mean" => ReduceOp::Avg,
            "max" => ReduceOp::Max,
            "min" => ReduceOp::Min,
            _ => {
                return Err(UnknownName {
                    what: "reduce op",
                    name: name.to_string(),
                })
            }
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Avg => "avg",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
        }
    }
}

impl fmt::Display for ReduceOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ReduceOp {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, UnknownName> {
        ReduceOp::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for op in ReduceOp::ALL {
            assert_eq!(op.name().parse::<ReduceOp>(), Ok(op));
        }
        assert_eq!(
            ReduceOp::parse("prod").unwrap_err().to_string(),
            "unknown reduce op `prod`"
        );
    }
}
