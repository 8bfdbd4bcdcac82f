//! Hostile schedules shared by `tests/hostile.rs` (refused, with bounded diagnostics) and
//! `benches/hostile.rs` (time and peak memory of `check` on them).

/// Hostile schedules: (name, source, expected first code, smallest group size refused).
/// Below that size they are ordinary programs, which `check` may verify or refuse.
pub const CASES: &[(&str, &str, &str, u32)] = &[
    (
        "max_chunks",
        "schedule a implements allreduce(x: [1048576]) {\n}\n",
        "E0315",
        2,
    ),
    (
        "loop_nest_five_deep",
        "schedule nest implements allreduce(x: [1]) {
    signal s;
    for a in 0..P { for b in 0..P { for c in 0..P { for d in 0..P { for e in 0..P {
        signal s @ (rank + 1) % P += 1;
    } } } } }
    wait s >= P * P * P * P * P;
}
",
        "E0315",
        12,
    ),
    (
        "signal_pad",
        "schedule many implements allreduce(x: [1]) {\n    signal s[1048576];\n}\n",
        "E0316",
        1,
    ),
    (
        "size_overflow",
        "schedule big implements allreduce(x: [1]) {
    scratch s: [2] each 4611686018427387904 * n;
    s[0] = copy(x);
}
",
        "E0317",
        1,
    ),
];

/// Every rank puts P times into the same slot of every peer: P² racing writes per location
/// (E0411 on every one of P² locations).
pub const RACES: &str = "schedule n2 implements allreduce(x: [1]) {
    scratch land: [P] of x;
    signal s;
    for a in 0..P { for b in 0..P { put x -> land[rank] @ b, signal s @ b += 1; } }
    wait s >= P * P;
    x = reduce(land[0..P]);
}
";
