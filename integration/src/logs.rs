//! Server log files, quoted in panic messages.

use std::path::PathBuf;

/// How many trailing lines of each log a panic message quotes.
pub const LOG_TAIL_LINES: usize = 200;

/// The log files of one or more servers, cheap to clone into closures that
/// build panic messages.
#[derive(Debug, Clone, Default)]
pub struct ServerLogs {
    files: Vec<(String, PathBuf)>,
}

impl ServerLogs {
    /// The log of one server, called `label` in messages.
    pub fn single(label: impl Into<String>, path: impl Into<PathBuf>) -> ServerLogs {
        ServerLogs {
            files: vec![(label.into(), path.into())],
        }
    }

    /// Both sets of logs.
    pub fn merged(mut self, other: &ServerLogs) -> ServerLogs {
        self.files.extend(other.files.iter().cloned());
        self
    }

    /// The last [`LOG_TAIL_LINES`] lines of every log, each under a
    /// `server log (<label>, <path>):` heading.
    pub fn tail(&self) -> String {
        let mut out = String::new();
        for (label, path) in &self.files {
            out.push_str(&format!("server log ({label}, {}):\n", path.display()));
            match std::fs::read(path) {
                Ok(bytes) => {
                    let text = String::from_utf8_lossy(&bytes);
                    let lines: Vec<&str> = text.lines().collect();
                    let skip = lines.len().saturating_sub(LOG_TAIL_LINES);
                    if skip > 0 {
                        out.push_str(&format!("  [... {skip} earlier lines ...]\n"));
                    }
                    for line in &lines[skip..] {
                        out.push_str("  ");
                        out.push_str(line);
                        out.push('\n');
                    }
                }
                Err(e) => out.push_str(&format!("  [cannot read log: {e}]\n")),
            }
        }
        out
    }
}

/// Every set of logs, merged in order.
impl FromIterator<ServerLogs> for ServerLogs {
    fn from_iter<I: IntoIterator<Item = ServerLogs>>(iter: I) -> ServerLogs {
        iter.into_iter()
            .fold(ServerLogs::default(), |logs, more| logs.merged(&more))
    }
}

/// `expect` whose panic message quotes server logs.
pub trait ExpectOrLogs<T> {
    /// The value, or a panic naming `what` failed, with the error and the
    /// tail of every log in `logs`.
    fn expect_or_logs(self, what: &str, logs: &ServerLogs) -> T;
}

impl<T, E: std::fmt::Debug> ExpectOrLogs<T> for Result<T, E> {
    #[track_caller]
    fn expect_or_logs(self, what: &str, logs: &ServerLogs) -> T {
        self.unwrap_or_else(|e| panic!("{what} failed: {e:?}\n{}", logs.tail()))
    }
}

impl<T> ExpectOrLogs<T> for Option<T> {
    #[track_caller]
    fn expect_or_logs(self, what: &str, logs: &ServerLogs) -> T {
        self.unwrap_or_else(|| panic!("{what}: nothing\n{}", logs.tail()))
    }
}
