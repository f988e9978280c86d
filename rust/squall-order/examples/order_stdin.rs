//! Orders a graph read from stdin and prints one priority per line.
//!
//! Input: one node per line, `name<TAB>is_task(0/1)<TAB>dep,dep,...`, where
//! deps are 0-based line numbers (the field may be empty). Handy for comparing
//! against `dask.order.order` from a script:
//!
//! ```text
//! cargo run --release -p squall-order --example order_stdin < graph.tsv
//! ```

use std::io::{self, BufRead, BufWriter, Write};
use std::process::ExitCode;

use squall_order::{order, Node};

fn parse_line(line: &str, lineno: usize) -> Result<Node, String> {
    // Split from the right so a name may itself contain tabs.
    let mut fields = line.rsplitn(3, '\t');
    let (Some(deps), Some(is_task), Some(name)) = (fields.next(), fields.next(), fields.next())
    else {
        return Err(format!("line {lineno}: expected 3 tab-separated fields"));
    };
    let is_task = match is_task {
        "1" => true,
        "0" => false,
        other => {
            return Err(format!(
                "line {lineno}: is_task must be 0 or 1, got {other:?}"
            ))
        }
    };
    let deps = deps
        .split(',')
        .filter(|d| !d.is_empty())
        .map(|d| {
            d.trim()
                .parse::<u32>()
                .map_err(|e| format!("line {lineno}: bad dep {d:?}: {e}"))
        })
        .collect::<Result<_, _>>()?;
    Ok(Node {
        deps,
        is_task,
        name: name.to_owned(),
    })
}

fn main() -> ExitCode {
    let mut nodes = Vec::new();
    for (i, line) in io::stdin().lock().lines().enumerate() {
        let parsed = line
            .map_err(|e| format!("line {}: {e}", i + 1))
            .and_then(|l| parse_line(&l, i + 1));
        match parsed {
            Ok(node) => nodes.push(node),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    match order(&nodes) {
        Ok(priorities) => {
            let mut out = BufWriter::new(io::stdout().lock());
            for p in priorities {
                if writeln!(out, "{p}").is_err() {
                    return ExitCode::FAILURE;
                }
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
