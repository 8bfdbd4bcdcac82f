//! The `// expect:` header shared by the negative suites (format in `grammar/README.md`):
//!
//! ```text
//! // expect: CODE at LINE:COL [ranks=P] [params=k=v,k=v] [schedule=NAME] [edit=EDIT]
//! ```

use std::collections::BTreeMap;

/// A parsed `// expect:` header.
#[derive(Debug)]
pub struct Expect {
    pub code: String,
    pub line: usize,
    pub col: usize,
    pub ranks: u32,
    pub params: Option<BTreeMap<String, i64>>,
    pub schedule: Option<String>,
    /// An edit of the instantiated program before verification (the verifier suite's
    /// `exit-credits`).
    pub edit: Option<String>,
}

pub fn parse_header(text: &str) -> Result<Expect, String> {
    let first = text.lines().next().ok_or("empty file")?;
    let rest = first
        .strip_prefix("// expect:")
        .ok_or("first line must be `// expect: CODE at LINE:COL …`")?;
    let mut words = rest.split_whitespace();
    let code = words.next().ok_or("missing code")?.to_string();
    if words.next() != Some("at") {
        return Err("expected `at LINE:COL` after the code".into());
    }
    let pos = words.next().ok_or("missing LINE:COL")?;
    let (l, c) = pos.split_once(':').ok_or("LINE:COL")?;
    let mut e = Expect {
        code,
        line: l.parse().map_err(|_| "bad line")?,
        col: c.parse().map_err(|_| "bad column")?,
        ranks: 4,
        params: None,
        schedule: None,
        edit: None,
    };
    for w in words {
        let (k, v) = w
            .split_once('=')
            .ok_or_else(|| format!("bad option `{w}`"))?;
        match k {
            "ranks" => e.ranks = v.parse().map_err(|_| "bad ranks")?,
            "schedule" => e.schedule = Some(v.to_string()),
            "edit" => e.edit = Some(v.to_string()),
            "params" => {
                let mut m = BTreeMap::new();
                for kv in v.split(',').filter(|s| !s.is_empty()) {
                    let (pk, pv) = kv.split_once('=').ok_or("params=k=v,k=v")?;
                    m.insert(pk.to_string(), pv.parse().map_err(|_| "bad param value")?);
                }
                e.params = Some(m);
            }
            _ => return Err(format!("unknown option `{k}`")),
        }
    }
    Ok(e)
}
