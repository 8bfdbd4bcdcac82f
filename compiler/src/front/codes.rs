//! Stable diagnostic codes of the front end (E01xx syntax, E02xx names and types) and of
//! instantiation (E03xx). Each is documented with a broken example in `grammar/README.md`.

/// Syntax error: the parser expected something else here.
pub const E_SYNTAX: &str = "E0101";
/// Integer literal does not fit in a signed 64-bit integer.
pub const E_INT_LITERAL: &str = "E0102";
/// `/*` comment never closed.
pub const E_UNTERMINATED_COMMENT: &str = "E0103";
/// Brackets nested deeper than the parser accepts, or an expression with too many operators.
pub const E_NESTING: &str = "E0104";

/// Unknown name (variable, buffer, signal, group, schedule, collective param, size variable).
pub const E_UNKNOWN_NAME: &str = "E0201";
/// A name declared twice in one scope (or a schedule defined twice in a library).
pub const E_DUPLICATE: &str = "E0202";
/// The number of roles does not match the collective.
pub const E_ROLE_COUNT: &str = "E0203";
/// `implements` names no known collective.
pub const E_UNKNOWN_COLLECTIVE: &str = "E0204";
/// One signal both set and added to.
pub const E_MIXED_SIGNAL: &str = "E0205";
/// A name of the wrong kind (a signal used as a buffer, a buffer as an integer, …).
pub const E_WRONG_KIND: &str = "E0206";
/// `dual identity` not spelled `identity assuming replicated`.
pub const E_IDENTITY_SPELLING: &str = "E0207";
/// A condition where an integer is expected, or the reverse.
pub const E_TYPE: &str = "E0208";
/// A declaration's size uses a per-rank value (`rank`, a `let`, a loop variable, a group).
pub const E_NOT_STATIC: &str = "E0209";
/// The collective needs a param the schedule does not declare (`root`, `src`, `dst`).
pub const E_MISSING_PARAM: &str = "E0210";
/// A signal array used without an index, or a scalar signal indexed.
pub const E_SIGNAL_INDEX: &str = "E0211";
/// `hostcoll` names no known framework collective.
pub const E_UNKNOWN_HOSTCOLL: &str = "E0212";
/// A put-with-signal whose signal goes to another peer than the data.
pub const E_SIGNAL_PEER: &str = "E0213";
/// A `use` leaves a callee role or param unbound, or binds a role with an integer (or reverse).
pub const E_USE_ARGS: &str = "E0214";
/// A `dual` leaves a param of the dual schedule unbound.
pub const E_DUAL_ARGS: &str = "E0215";
/// `scratch … of BUF` where BUF has runtime-sized (alltoallv) chunks.
pub const E_SCRATCH_OF_COUNTS: &str = "E0216";
/// `inout` on a role the collective does not read as an input (it is written anyway).
pub const E_INOUT_ROLE: &str = "E0217";

/// Group size outside 1..=64.
pub const E_GROUP_SIZE: &str = "E0300";
/// Division or modulo by zero.
pub const E_DIV_ZERO: &str = "E0301";
/// Integer overflow.
pub const E_OVERFLOW: &str = "E0302";
/// A peer (or group member index) outside the group.
pub const E_PEER_RANGE: &str = "E0303";
/// `use` recursion.
pub const E_RECURSION: &str = "E0304";
/// A param value outside its declared range.
pub const E_PARAM_RANGE: &str = "E0305";
/// A chunk or signal index outside its buffer or array.
pub const E_BOUNDS: &str = "E0306";
/// An empty or reversed chunk range where a non-empty one is needed.
pub const E_EMPTY_REGION: &str = "E0307";
/// A reduce whose operands are all empty ranges.
pub const E_EMPTY_REDUCE: &str = "E0308";
/// Ranks disagree on something that must be symmetric (the sequence of `use`d schedules).
pub const E_ASYMMETRIC: &str = "E0309";
/// `over nodes(L)` with L not a positive divisor of P.
pub const E_NODES: &str = "E0310";
/// A chunk count, array length or group argument outside 1..=2^20.
pub const E_COUNT: &str = "E0311";
/// A negative signal value or wait target.
pub const E_NEGATIVE_SIGNAL: &str = "E0312";
/// A `use` binds a region whose chunk count differs from the callee role's.
pub const E_USE_CHUNKS: &str = "E0313";
/// alltoallv roles must have P chunks (one per peer).
pub const E_ALLTOALLV_CHUNKS: &str = "E0314";
/// The unrolled program is too large (a runaway loop nest, too many steps or memory locations
/// for the verifier's budget, `compiler/src/ir/limits.rs`).
pub const E_TOO_LARGE: &str = "E0315";
/// The plan needs more signal slots than a group's signal pad leaves to one plan.
pub const E_SIGNAL_SLOTS: &str = "E0316";
/// A buffer's size in bytes could overflow 64 bits for role buffers the runtime accepts.
pub const E_SIZE_OVERFLOW: &str = "E0317";
/// A `require` condition does not hold for this group size and param binding.
pub const E_REQUIRE: &str = "E0318";

/// A chunk map names no role of its collective declaration.
pub const E_UNKNOWN_ROLE: &str = "E0218";
/// A statement outside its place: a chunk map in a schedule, or a schedule statement (put,
/// signal, declaration, …) in a collective declaration.
pub const E_MISPLACED: &str = "E0219";
/// A collective declaration whose chunk map writes no role (nothing to prove).
pub const E_NO_OUTPUT: &str = "E0220";

/// A declared collective maps one block twice (`=` twice, `=` and `+=`, one source added twice).
pub const E_MAPPED_TWICE: &str = "E0319";
/// A declared collective reduces blocks of different roles into one block.
pub const E_MIXED_REDUCE: &str = "E0320";
/// A `channel` outside `0..MAX_CHANNELS`, or a step that must run on channel 0 (a `hostcoll`)
/// inside another channel.
pub const E_CHANNEL: &str = "E0321";
