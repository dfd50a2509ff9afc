//! Adds up what `cargo test` and the GPU harnesses report, so `cargo xtask
//! test` closes with one line, GPU cases that could not run counted as
//! skipped (never as passed).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

#[derive(Default)]
pub struct Counts {
    pub passed: u64,
    pub failed: u64,
    pub skipped: u64,
    pub success: bool,
    /// Commands added up (`add`): a total succeeds when every one did.
    pub runs: u32,
}

impl Counts {
    pub fn add(&mut self, other: &Counts) {
        self.passed += other.passed;
        self.failed += other.failed;
        self.skipped += other.skipped;
        self.success = (self.runs == 0 || self.success) && other.success;
        self.runs += 1;
    }
}

/// The number just before `word` in a `, `- or `; `-separated summary.
fn number_before(line: &str, word: &str) -> u64 {
    line.split([';', ',', '('])
        .find(|p| p.trim_end().ends_with(word))
        .and_then(|p| p.split_whitespace().rev().nth(1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Counts in one output line: libtest's `test result:`, the harnesses'
/// `N passed, N failed` and `gpu tests: N skipped (...)` / `fuzz: N skipped`.
pub fn parse_line(line: &str, counts: &mut Counts) {
    let line = line.trim();
    if line.starts_with("test result:") {
        counts.passed += number_before(line, "passed");
        counts.failed += number_before(line, "failed");
        counts.skipped += number_before(line, "ignored");
    } else if let Some(rest) = line.strip_prefix("gpu tests: ").or_else(|| line.strip_prefix("fuzz: ")) {
        if rest.contains(" skipped") {
            counts.skipped += rest.split_whitespace().next().and_then(|n| n.parse().ok()).unwrap_or(0);
        } else {
            counts.passed += number_before(rest, "passed");
            counts.failed += number_before(rest, "failed");
        }
    } else if let Some(summary) = pytest_summary(line) {
        counts.passed += number_before(summary, "passed");
        counts.failed += number_before(summary, "failed") + number_before(summary, "error") + number_before(summary, "errors");
        counts.skipped += number_before(summary, "skipped");
    } else if line.ends_with(" failed") && line.contains(" passed, ") && line.split_whitespace().count() == 4 {
        counts.passed += number_before(line, "passed");
        counts.failed += number_before(line, "failed");
    }
}

/// pytest's closing line (`32 passed, 2 skipped in 0.10s`, perhaps framed
/// in `=`), without its duration.
fn pytest_summary(line: &str) -> Option<&str> {
    let line = line.trim_matches(|c| c == '=' || c == ' ');
    let (counts, time) = line.rsplit_once(" in ")?;
    let numbered = counts.split(", ").all(|p| p.split_whitespace().next().is_some_and(|n| n.parse::<u64>().is_ok()));
    (time.ends_with('s') && numbered && ["passed", "failed", "skipped", "error"].iter().any(|w| counts.contains(w))).then_some(counts)
}

/// Runs the command, echoing its output, and adds up the counts.
pub fn run_counting(cmd: &mut Command) -> Result<Counts, String> {
    let mut child = cmd.stdout(Stdio::piped()).spawn().map_err(|e| format!("running {cmd:?}: {e}"))?;
    let mut counts = Counts::default();
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.map_err(|e| e.to_string())?;
        println!("{line}");
        parse_line(&line, &mut counts);
    }
    counts.success = child.wait().map_err(|e| e.to_string())?.success();
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(lines: &[&str]) -> (u64, u64, u64) {
        let mut c = Counts::default();
        lines.iter().for_each(|l| parse_line(l, &mut c));
        (c.passed, c.failed, c.skipped)
    }

    /// A command that failed before reporting anything (a build that did
    /// not compile) fails the total, whatever runs after it.
    #[test]
    fn a_failed_command_without_counts_fails_the_total() {
        let mut total = Counts::default();
        total.add(&Counts { success: false, ..Counts::default() });
        total.add(&Counts { passed: 45, success: true, ..Counts::default() });
        assert!(!total.success);
        let mut ok = Counts::default();
        ok.add(&Counts { passed: 1, success: true, ..Counts::default() });
        ok.add(&Counts { skipped: 2, success: true, ..Counts::default() });
        assert!(ok.success);
    }

    #[test]
    fn reads_libtest_and_harness_summaries() {
        assert_eq!(parse(&["test result: ok. 12 passed; 0 failed; 2 ignored; 0 measured; 0 filtered out; finished in 1s"]), (12, 0, 2));
        assert_eq!(parse(&["gpu tests: 30 skipped (no CUDA device)"]), (0, 0, 30));
        assert_eq!(parse(&["gpu tests: 29 passed, 1 failed"]), (29, 1, 0));
        assert_eq!(parse(&["fuzz: 48 skipped (no CUDA driver)"]), (0, 0, 48));
        assert_eq!(parse(&["20000 passed, 0 failed"]), (20000, 0, 0));
        assert_eq!(parse(&["ok   bf16/mha-short rel_l2=1e-3 passed, 3 failed"]), (0, 0, 0));
    }
}
