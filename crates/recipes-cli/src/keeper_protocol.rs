//! What `recipes` and its keeper say to each other over their socket pair:
//! one line per message.

/// `recipes` to the keeper.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// Send this signal to every process of CMD's tree.
    Signal(libc::c_int),
    /// SIGKILL the whole tree; the keeper reports [`Report::Empty`] (or an
    /// `Exited` that is alone) once nothing of it is left.
    Kill,
}

/// The keeper to `recipes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Report {
    /// CMD runs with this pid.
    Started(libc::pid_t),
    /// CMD could not be started: this errno.
    Failed(i32),
    /// CMD was reaped with this wait status; `alone` when no process it
    /// started is left (else [`Report::Empty`] follows once none is).
    Exited {
        /// The raw wait status.
        status: libc::c_int,
        /// Nothing else of the tree is left.
        alone: bool,
    },
    /// CMD and every process it started are gone.
    Empty,
}

impl Order {
    /// The line that carries it.
    pub fn line(self) -> String {
        match self {
            Order::Signal(sig) => format!("signal {sig}\n"),
            Order::Kill => "kill\n".to_owned(),
        }
    }

    /// The order `line` carries, if any.
    pub fn parse(line: &str) -> Option<Order> {
        let mut words = line.split_whitespace();
        match (words.next()?, words.next()) {
            ("signal", Some(n)) => n.parse().ok().map(Order::Signal),
            ("kill", None) => Some(Order::Kill),
            _ => None,
        }
    }
}

impl Report {
    /// The line that carries it.
    pub fn line(self) -> String {
        match self {
            Report::Started(pid) => format!("started {pid}\n"),
            Report::Failed(errno) => format!("failed {errno}\n"),
            Report::Exited { status, alone } => format!("exited {status} {}\n", u8::from(alone)),
            Report::Empty => "empty\n".to_owned(),
        }
    }

    /// The report `line` carries, if any.
    pub fn parse(line: &str) -> Option<Report> {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words[..] {
            ["started", pid] => pid.parse().ok().map(Report::Started),
            ["failed", errno] => errno.parse().ok().map(Report::Failed),
            ["exited", status, alone] => Some(Report::Exited {
                status: status.parse().ok()?,
                alone: alone == "1",
            }),
            ["empty"] => Some(Report::Empty),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_message_reads_back() {
        for order in [Order::Signal(libc::SIGTERM), Order::Kill] {
            assert_eq!(Order::parse(&order.line()), Some(order));
        }
        for report in [
            Report::Started(42),
            Report::Failed(libc::ENOENT),
            Report::Exited {
                status: 3 << 8,
                alone: false,
            },
            Report::Exited {
                status: 9,
                alone: true,
            },
            Report::Empty,
        ] {
            assert_eq!(Report::parse(&report.line()), Some(report));
        }
    }
}
