//! Ascend C lowering and host simulation.
