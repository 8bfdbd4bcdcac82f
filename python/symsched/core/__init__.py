"""The framework-neutral core of symsched (no framework is imported here)."""
