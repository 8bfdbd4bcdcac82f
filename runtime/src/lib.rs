//! symsched host runtime.
