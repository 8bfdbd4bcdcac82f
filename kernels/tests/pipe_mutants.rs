//! Deleted-flag mutants: every intra-core synchronisation a generated kernel executes
//! (SetFlag/WaitFlag pairs, PipeBarrier, the adjacent CrossCoreSetFlag/CrossCoreWaitFlag pair of
//! the AIV barrier) is deleted in turn, the mutant is rebuilt against the simulation and run
//! against the runtime's interpreter. The simulation must catch each deletion — by name
//! (`SYMSCHED_SIM_E_PIPE_RACE`, `SYMSCHED_SIM_E_GM_RACE`), another named status, or a wrong
//! result — unless it is *implied* or listed in [`HARMLESS`].
//!
//! Implied: the simulation records which executed sync calls ever ordered something the calls
//! before them had not (`SimKernel::ordering_sync_sites`); deleting one that never did changes
//! no happens-before relation of the kernel, so the remaining calls give the device the same
//! order (a WaitFlag after a PipeBarrier<PIPE_ALL> on the same path, a hand-over whose order an
//! earlier pair already gave transitively). Computed from the unmutated kernel's runs, never
//! listed by hand. [`HARMLESS`] holds the rest that is not caught, each with its device-level
//! reason.
//!
//! Only sync calls that ran in the unmutated kernel are mutated (the simulation records their
//! source lines), so a mutant never deletes dead code. A mutant keeps the kernel's line numbers
//! (the call is replaced by a comment) and is renamed (`<name>_m<i>`) so that eight mutants share
//! one g++ process (`sim_build::build_many`); builds are cached by content hash.
//!
//! Default: [`default_kernels`] (three kernels chosen to run every Handoff pair the lowering
//! has, the fp8 scalar codec's flags, the Compare/Select fold and, at blockDim 2, the AIV
//! barrier). `cargo test -p symsched-kernels --test pipe_mutants -- --ignored` runs every
//! standard schedule at P = 2 with the type/op variants of [`full_kernels`].

mod common;
use common::*;
use std::collections::BTreeMap;
use symsched_kernels::sim_build::{self, OptLevel, SimKernel, SimSources};
use symsched_kernels::{lower, DType, LowerOptions, ReduceOp};
use symsched_plan::Plan;

/// n = 1000 at a 4 KiB UB budget: several tiles per step, so tile reuse across iterations
/// (write-after-read hazards) is exercised as well as the hand-over within one tile.
const N: u64 = 1000;
const UB: u32 = 4096;
/// Interleavings a mutant that the first seed did not catch is run with.
const SEEDS: [u64; 4] = [0, 1, 2, 3];

/// One comparison with the runtime at n = [`N`], every alltoallv count near N: each transfer
/// then spans several 64-element blocks, so at blockDim 2 both AIVs move part of every one
/// (with the shared test sizes most off-diagonal counts are a few elements, all on core 0, and
/// a deleted AIV barrier before their signal had nothing to order).
fn run_seeded(k: &SimKernel, plan: &Plan, o: &LowerOptions, seed: u64) -> Result<(), Mismatch> {
    let mut sizes = sizes_for(plan, N);
    let p = u64::from(plan.group_size);
    sizes.counts = Some(
        (0..p)
            .map(|s| (0..p).map(|r| N - 5 * s - 3 * r).collect())
            .collect(),
    );
    compare_with_runtime_sized(k, plan, o, &sizes, N, seed)
}

/// Deletions that are not implied (they order something new at least once) and still do not
/// matter: (part of the kernel name, site label `<function>: <call>`, why). An empty name part
/// matches every kernel, `!part` every kernel whose name lacks `part`. Each reason holds on the
/// device, not only in the simulation.
const HARMLESS: &[(&str, &str, &str)] = &[
    (
        "_b2",
        "SyncCores: PipeBarrier<PIPE_ALL>",
        "the mode-0 cross-core set is issued on PIPE_MTE3 after everything this core did that \
         another core may read: local GM writes (MTE3, published by the set itself), blocking gets \
         and quieted puts (which the scalar unit waited for before it issued the set). What the \
         barrier adds is the drain of MTE2/V work on UB, which no other core reads. Kept as the \
         documented core-wide drain.",
    ),
    (
        "matmul",
        "SyncCores: PipeBarrier<PIPE_ALL>",
        "kernels with matmul steps run two AIVs per AI Core (kVecCores = 2 at blockDim 1), so \
         the reason of the `_b2` entry holds: the mode-0 cross-core set is issued on PIPE_MTE3 \
         after everything this core did that another core may read; the barrier adds the drain \
         of MTE2/V work on UB, which no other core reads.",
    ),
    (
        "",
        "LocalWritesDone: SetFlag/WaitFlag<MTE3_S>",
        "every consumer of the GM that MTE3 wrote is checked against the write by the \
         simulation: a signal of this core publishing it (check_published), an MTE2 read or a \
         GM-source put on any core of the rank, a Cube read after a cross-core flag (each an \
         unordered read of the shadowed bytes), a peer's get (LocalRec: known finished only \
         through a signal from a core that knew it). So in a mutant not caught no consumer came \
         before the next PipeBarrier<PIPE_ALL> (aclshmem_quiet at the end of Run, SyncCores) or \
         the kernel's end, and those order MTE3 on the device as well; the pair only made the \
         scalar unit learn it earlier.",
    ),
    (
        "!_b2",
        "Matmul: CrossCoreSetFlag/CrossCoreWaitFlag(kFlagAicSync)",
        "with one AIC the mode-0 meeting of the AICs has one member: the kFlagDone set that \
         follows is issued on PIPE_FIX after every Fixpipe write of the tiles and publishes them \
         to the AIVs by itself; the pair only makes the AIC's scalar unit wait for its own \
         Fixpipe, and the AIC reads none of those bytes afterwards. (At blockDim 2 an AIV reads \
         tiles of the other AIC, which the meeting orders.)",
    ),
];

/// Deletions the device needs but the simulation cannot see: (part of the kernel name, site
/// label, what the device does that the simulation does not model). Reported as gaps; they
/// fail the check like any other miss.
const SIM_GAPS: &[(&str, &str, &str)] = &[];

/// How a mutant was caught, or not.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    /// The simulation stopped it with this status.
    Status(String),
    /// It finished with a wrong result.
    Wrong(String),
    /// It built, ran and agreed with the runtime under every seed.
    Survived,
    /// It does not compile (a deletion that breaks the source, never expected).
    Build(String),
}

/// One deletion: the 0-based source lines whose sync call is removed, and its label.
#[derive(Debug, Clone)]
struct Mutant {
    label: String,
    lines: Vec<usize>,
}

impl Mutant {
    /// The 1-based line of the call that orders (the WaitFlag of a pair, the barrier, the
    /// cross-core wait), where the simulation records whether it ordered anything.
    fn ordering_line(&self) -> u32 {
        self.lines.last().map_or(0, |&l| l as u32 + 1)
    }
}

/// The sync call on a source line: (kind, argument), e.g. ("SetFlag", "MTE2_V").
fn sync_call(line: &str) -> Option<(&'static str, String)> {
    let arg = |rest: &str, end: char| rest.split(end).next().unwrap_or("").to_string();
    if let Some(i) = line.find("AscendC::SetFlag<AscendC::HardEvent::") {
        return Some((
            "SetFlag",
            arg(
                &line[i + "AscendC::SetFlag<AscendC::HardEvent::".len()..],
                '>',
            ),
        ));
    }
    if let Some(i) = line.find("AscendC::WaitFlag<AscendC::HardEvent::") {
        return Some((
            "WaitFlag",
            arg(
                &line[i + "AscendC::WaitFlag<AscendC::HardEvent::".len()..],
                '>',
            ),
        ));
    }
    if let Some(i) = line.find("AscendC::PipeBarrier<") {
        return Some((
            "PipeBarrier",
            arg(&line[i + "AscendC::PipeBarrier<".len()..], '>'),
        ));
    }
    if let Some(i) = line.find("AscendC::CrossCoreSetFlag<") {
        let rest = &line[i..];
        let flag = rest.split('(').nth(1).unwrap_or("").split(')').next();
        return Some(("CrossCoreSetFlag", flag.unwrap_or("").to_string()));
    }
    if let Some(i) = line.find("AscendC::CrossCoreWaitFlag(") {
        return Some((
            "CrossCoreWaitFlag",
            arg(&line[i + "AscendC::CrossCoreWaitFlag(".len()..], ')'),
        ));
    }
    None
}

/// Name of the function whose body holds line `at` (the nearest `__aicore__ inline` above).
fn enclosing_function(lines: &[&str], at: usize) -> String {
    for l in lines[..=at].iter().rev() {
        if let Some(i) = l.find("__aicore__ inline") {
            let head = &l[i..];
            if let Some(p) = head.find('(') {
                let name = head[..p].rsplit([' ', '*', '&']).next().unwrap_or("");
                if !name.is_empty() {
                    return name.to_string();
                }
            }
        }
    }
    "?".into()
}

/// The deletions of a kernel whose sync calls ran on `sites` (1-based lines). A WaitFlag goes
/// with the SetFlag of the same event on the line before it (deleting only one of the two is a
/// misuse the simulation names at once: a WaitFlag without SetFlag, or a flag set twice); a
/// cross-core set goes with the wait on the next line (the AIV barrier). Returns the mutants and
/// the executed sites that are not mutated, with why.
fn mutants(kernel: &str, sites: &[u32]) -> (Vec<Mutant>, Vec<String>) {
    let lines: Vec<&str> = kernel.lines().collect();
    let mut out = vec![];
    let mut skipped = vec![];
    for &s in sites {
        let at = s as usize - 1;
        let Some((kind, arg)) = lines.get(at).and_then(|l| sync_call(l)) else {
            skipped.push(format!("line {s}: no sync call parsed"));
            continue;
        };
        let next = lines.get(at + 1).and_then(|l| sync_call(l));
        let prev = at
            .checked_sub(1)
            .and_then(|p| lines.get(p))
            .and_then(|l| sync_call(l));
        let func = enclosing_function(&lines, at);
        match kind {
            "SetFlag" => match next {
                Some(("WaitFlag", a)) if a == arg => out.push(Mutant {
                    label: format!("{func}: SetFlag/WaitFlag<{arg}>"),
                    lines: vec![at, at + 1],
                }),
                _ => skipped.push(format!(
                    "{func}: SetFlag<{arg}> without an adjacent WaitFlag"
                )),
            },
            "WaitFlag" => {
                if !matches!(prev, Some(("SetFlag", ref a)) if *a == arg) {
                    skipped.push(format!(
                        "{func}: WaitFlag<{arg}> without an adjacent SetFlag"
                    ));
                }
            }
            "PipeBarrier" => out.push(Mutant {
                label: format!("{func}: PipeBarrier<{arg}>"),
                lines: vec![at],
            }),
            "CrossCoreSetFlag" => match next {
                Some(("CrossCoreWaitFlag", a)) if a == arg => out.push(Mutant {
                    label: format!("{func}: CrossCoreSetFlag/CrossCoreWaitFlag({arg})"),
                    lines: vec![at, at + 1],
                }),
                // A set whose wait runs on another core: deleting either side leaves the other
                // core waiting for ever (the device hangs; the simulation gives up after 120 s).
                _ => skipped.push(format!(
                    "{func}: CrossCoreSetFlag({arg}) waited for on another core (deleting it hangs)"
                )),
            },
            _ => {
                if !matches!(prev, Some(("CrossCoreSetFlag", ref a)) if *a == arg) {
                    skipped.push(format!(
                        "{func}: CrossCoreWaitFlag({arg}) set on another core (deleting it hangs)"
                    ));
                }
            }
        }
    }
    (out, skipped)
}

/// `src` with `m`'s sync calls replaced by a comment (line numbers kept) and every name of the
/// kernel renamed with `suffix`, so mutants of one kernel can share a translation unit.
fn apply(src: &SimSources, m: &Mutant, suffix: &str) -> SimSources {
    let mut lines: Vec<String> = src.kernel.lines().map(str::to_string).collect();
    for &at in &m.lines {
        let l = &lines[at];
        let i = l.find("AscendC::").expect("a sync call on a mutated line");
        let j = i + l[i..].find(';').expect("the call ends on its line") + 1;
        lines[at] = format!("{}/* deleted: {} */{}", &l[..i], &l[i..j], &l[j..]);
    }
    let mut kernel = lines.join("\n");
    kernel.push('\n');
    let new = format!("{}{suffix}", src.name);
    let rename = |t: &str| {
        t.replace(&src.name, &new)
            .replace(&src.name.to_uppercase(), &new.to_uppercase())
    };
    SimSources {
        name: new.clone(),
        kernel: rename(&kernel),
        table: rename(&src.table),
        sim_entry: rename(&src.sim_entry),
    }
}

fn status_of(m: &Mismatch) -> Outcome {
    match m {
        Mismatch::Sim(e) => Outcome::Status(
            e.sim_status()
                .map(str::to_string)
                .unwrap_or_else(|| e.to_string()),
        ),
        Mismatch::Wrong(s) | Mismatch::Setup(s) => Outcome::Wrong(s.clone()),
    }
}

/// One mutant's result.
struct Row {
    kernel: String,
    label: String,
    outcome: Outcome,
    /// The deleted call never ordered anything new in the unmutated kernel's runs.
    implied: bool,
}

struct Report {
    rows: Vec<Row>,
    skipped: Vec<(String, String)>,
}

/// Build and run every kernel, then every deletion of each.
fn run_mutants(kernels: &[(Plan, LowerOptions)]) -> Report {
    let t0 = std::time::Instant::now();
    let srcs: Vec<SimSources> = kernels
        .iter()
        .map(|(p, o)| SimSources::from(&lower(p, o).expect("lowering")))
        .collect();
    let cache = cache_dir();
    let jobs = sim_build::default_jobs();
    let originals = sim_build::build_many(&srcs, &cache, OptLevel::O0, jobs);
    let mut all = vec![];
    let mut skipped = vec![];
    for (((plan, o), src), k) in kernels.iter().zip(&srcs).zip(originals) {
        let k = k.unwrap_or_else(|e| panic!("{}: {e}", src.name));
        // Every seed a mutant runs with: what ordered something is recorded over all of them.
        for &seed in &SEEDS {
            run_seeded(&k, plan, o, seed)
                .unwrap_or_else(|e| panic!("unmutated {} (seed {seed}): {e}", src.name));
        }
        let ordering = k.ordering_sync_sites();
        let (ms, sk) = mutants(&src.kernel, &k.sync_sites());
        assert!(!ms.is_empty(), "{}: no sync call ran", src.name);
        skipped.extend(sk.into_iter().map(|s| (src.name.clone(), s)));
        for (i, m) in ms.into_iter().enumerate() {
            let built = apply(src, &m, &format!("_m{i}"));
            let implied = !ordering.contains(&m.ordering_line());
            all.push((plan, o, src.name.clone(), m, built, implied));
        }
    }
    let built: Vec<SimSources> = all.iter().map(|a| a.4.clone()).collect();
    let t_orig = t0.elapsed();
    let libs = sim_build::build_many(&built, &cache, OptLevel::O0, jobs);
    let t_built = t0.elapsed();
    let mut rows = vec![];
    for ((plan, o, name, m, _, implied), lib) in all.into_iter().zip(libs) {
        let outcome = match lib {
            Err(e) => Outcome::Build(e.to_string()),
            Ok(k) => SEEDS
                .iter()
                .find_map(|&seed| run_seeded(&k, plan, o, seed).err().map(|e| status_of(&e)))
                .unwrap_or(Outcome::Survived),
        };
        eprintln!(
            "{name} | {} | {:?}{}",
            m.label,
            outcome,
            if implied { " | implied" } else { "" }
        );
        rows.push(Row {
            kernel: name,
            label: m.label,
            outcome,
            implied,
        });
    }
    eprintln!(
        "{} kernels, {} mutants: originals built/cached and run in {:.1} s, mutants built/cached in \
         {:.1} s, run in {:.1} s",
        kernels.len(),
        rows.len(),
        t_orig.as_secs_f64(),
        (t_built - t_orig).as_secs_f64(),
        (t0.elapsed() - t_built).as_secs_f64()
    );
    Report { rows, skipped }
}

fn listed(table: &[(&str, &str, &'static str)], kernel: &str, label: &str) -> Option<&'static str> {
    let name_matches = |k: &str| match k.strip_prefix('!') {
        Some(absent) => !kernel.contains(absent),
        None => kernel.contains(k),
    };
    table
        .iter()
        .find(|(k, l, _)| name_matches(k) && *l == label)
        .map(|(_, _, why)| *why)
}

/// Print every mutant's outcome and class (caught, implied, harmless with its reason, a gap of
/// the simulation) and fail on any deletion not caught that is neither implied nor listed
/// harmless, on every gap, and on any mutant that does not build.
fn check(r: &Report) {
    let mut bad = vec![];
    let mut tally: BTreeMap<String, usize> = BTreeMap::new();
    let mut class: BTreeMap<&str, usize> = BTreeMap::new();
    let mut survivors: BTreeMap<(String, &str), usize> = BTreeMap::new();
    for row in &r.rows {
        let (k, label, o) = (&row.kernel, &row.label, &row.outcome);
        let short = match o {
            Outcome::Status(s) => s.clone(),
            Outcome::Wrong(_) => "wrong result".into(),
            Outcome::Survived => "not caught".into(),
            Outcome::Build(_) => "does not build".into(),
        };
        *tally.entry(short.clone()).or_default() += 1;
        let c = match o {
            Outcome::Status(_) | Outcome::Wrong(_) if row.implied => "caught (implied)",
            Outcome::Status(_) | Outcome::Wrong(_) => "caught",
            Outcome::Build(e) => {
                bad.push(format!("{k}: mutant `{label}` does not build: {e}"));
                "does not build"
            }
            Outcome::Survived if row.implied => "implied",
            Outcome::Survived => {
                if let Some(why) = listed(SIM_GAPS, k, label) {
                    bad.push(format!(
                        "{k}: deleting `{label}` is not caught (simulation gap: {why})"
                    ));
                    "simulation gap"
                } else if listed(HARMLESS, k, label).is_some() {
                    "harmless on device"
                } else {
                    bad.push(format!("{k}: deleting `{label}` is not caught"));
                    "not explained"
                }
            }
        };
        *class.entry(c).or_default() += 1;
        if matches!(o, Outcome::Survived) {
            *survivors.entry((label.clone(), c)).or_default() += 1;
        }
        match (c, listed(HARMLESS, k, label)) {
            ("harmless on device", Some(why)) => {
                eprintln!("{k} | {label} | {short} | harmless: {why}")
            }
            _ => eprintln!("{k} | {label} | {short} | {c}"),
        }
    }
    for (k, s) in &r.skipped {
        eprintln!("{k} | not mutated: {s}");
    }
    for ((label, c), n) in &survivors {
        eprintln!("survivors: {n} x {label} ({c})");
    }
    eprintln!("outcomes: {tally:?}");
    eprintln!("classes: {class:?}");
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

fn plan(p: u32, schedule: &str) -> Plan {
    standard_plans(p)
        .into_iter()
        .find(|x| x.schedule == schedule)
        .unwrap_or_else(|| panic!("no standard schedule {schedule}"))
}

fn with_block_dim(mut o: LowerOptions, b: u32) -> LowerOptions {
    o.block_dim = b;
    o
}

fn default_kernels() -> Vec<(Plan, LowerOptions)> {
    vec![
        // Converting puts onto a bf16 wire, the reduce of wire operands, the cast back.
        (
            plan(2, "allreduce_two_shot_wire"),
            opts(DType::F32, DType::Bf16, ReduceOp::Sum, UB),
        ),
        // fp8: the scalar encode/decode between the queues; the Compare/Select max fold.
        (
            plan(2, "allreduce_two_shot_wire"),
            opts(DType::F32, DType::E4m3, ReduceOp::Max, UB),
        ),
        // Two AIVs: the cross-core barrier before every signal; f64's scalar fold.
        (
            plan(2, "allreduce_one_shot"),
            with_block_dim(opts(DType::F64, DType::F64, ReduceOp::Avg, UB), 2),
        ),
    ]
}

fn full_kernels() -> Vec<(Plan, LowerOptions)> {
    let mut v = vec![];
    for plan in standard_plans(2) {
        let wire = plan
            .buffers
            .iter()
            .any(|b| b.elem == symsched_plan::ElemClass::Wire);
        let mut os = vec![
            opts(DType::F32, DType::F32, ReduceOp::Sum, UB),
            with_block_dim(opts(DType::F32, DType::F32, ReduceOp::Sum, UB), 2),
        ];
        if plan.collective.reduces() {
            os.push(opts(DType::Bf16, DType::Bf16, ReduceOp::Min, UB));
            os.push(opts(DType::I32, DType::I32, ReduceOp::Avg, UB));
            os.push(opts(DType::F64, DType::F64, ReduceOp::Sum, UB));
        }
        if wire {
            os.push(opts(DType::F32, DType::Bf16, ReduceOp::Sum, UB));
            os.push(opts(DType::Bf16, DType::E5m2, ReduceOp::Avg, UB));
        }
        for o in os {
            if lower(&plan, &o).is_ok() {
                v.push((plan.clone(), o));
            }
        }
    }
    v
}

#[test]
fn every_deleted_flag_that_matters_is_caught() {
    check(&run_mutants(&default_kernels()));
}

/// The whole set: every standard schedule at P = 2 (f32 sum at blockDim 1 and 2, bf16 min,
/// i32 avg, f64 sum, and the wire variants).
#[test]
#[ignore = "builds several hundred mutants; run with --ignored"]
fn every_deleted_flag_of_every_standard_schedule() {
    check(&run_mutants(&full_kernels()));
}

/// The vector unit's hand-over from the MTE2 load: without it the Cast reads a tile MTE2 may
/// still be writing, and the simulation names the race.
#[test]
fn a_missing_mte2_to_v_flag_is_reported_as_a_pipe_race() {
    let plan = plan(2, "allreduce_two_shot_wire");
    let o = opts(DType::F32, DType::F32, ReduceOp::Sum, UB);
    let src = SimSources::from(&lower(&plan, &o).unwrap());
    let from = "            AscendC::SetFlag<AscendC::HardEvent::MTE2_V>(AscendC::EVENT_ID0);\n            AscendC::WaitFlag<AscendC::HardEvent::MTE2_V>(AscendC::EVENT_ID0);\n";
    assert!(src.kernel.contains(from), "the Handoff MTE2 -> V pair");
    let k = build_edited(&plan, &o, |s| &mut s.kernel, from, "");
    let e = run_fresh(&k, &plan, &o, N, std::time::Duration::from_secs(30))
        .expect_err("the kernel without the MTE2 -> V hand-over must fail");
    assert_eq!(e.sim_status(), Some("SYMSCHED_SIM_E_PIPE_RACE"), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("MTE2") && msg.contains('V'),
        "the report names both engines: {msg}"
    );
}

/// Two AIVs: core 0 signals for both once the AIV barrier says core 1's quieted puts are done.
/// Without the barrier's cross-core pair the signal may overtake core 1's put: the peer reads
/// GM the put writes before it is known complete, which the simulation names by happens-before
/// under every seed (not only when thread timing lets the peer see stale data).
#[test]
fn a_signal_before_another_cores_put_is_reported_as_a_gm_race() {
    let plan = plan(2, "allgather_push");
    let o = with_block_dim(opts(DType::F32, DType::F32, ReduceOp::Sum, UB), 2);
    let src = SimSources::from(&lower(&plan, &o).unwrap());
    let from = "            AscendC::CrossCoreSetFlag<0x0, PIPE_MTE3>(kFlagAivSync);\n            AscendC::CrossCoreWaitFlag(kFlagAivSync);\n";
    assert!(src.kernel.contains(from), "SyncCores' cross-core pair");
    let k = build_edited(&plan, &o, |s| &mut s.kernel, from, "");
    for seed in SEEDS {
        match run_seeded(&k, &plan, &o, seed) {
            Err(Mismatch::Sim(e)) => {
                assert_eq!(
                    e.sim_status(),
                    Some("SYMSCHED_SIM_E_GM_RACE"),
                    "seed {seed}: {e}"
                );
                let msg = e.to_string();
                assert!(
                    msg.contains("_put") && msg.contains("known complete"),
                    "the report names the put: {msg}"
                );
            }
            Err(other) => panic!("seed {seed}: expected SYMSCHED_SIM_E_GM_RACE, got {other:?}"),
            Ok(()) => panic!("seed {seed}: the kernel without the AIV barrier's pair passed"),
        }
    }
}

/// The kernels of [`full_kernels`] whose name ends with one of the comma-separated names in
/// `SYMSCHED_MUTANT_KERNELS` (e.g. `allreduce_ring_p2_f32_f32_sum,allgather_push_p2_f32_f32_sum_b2`),
/// for looking at a few kernels' deletions without building the whole set.
#[test]
#[ignore = "set SYMSCHED_MUTANT_KERNELS; run with --ignored"]
fn every_deleted_flag_of_selected_kernels() {
    let want = std::env::var("SYMSCHED_MUTANT_KERNELS").unwrap_or_default();
    let want: Vec<&str> = want.split(',').filter(|w| !w.is_empty()).collect();
    let ks: Vec<_> = full_kernels()
        .into_iter()
        .filter(|(p, o)| {
            let name = lower(p, o).expect("lowering").name;
            want.iter().any(|w| name.ends_with(w))
        })
        .collect();
    assert!(
        !ks.is_empty(),
        "no kernel of the full set matches SYMSCHED_MUTANT_KERNELS"
    );
    check(&run_mutants(&ks));
}
