//! `recipes join NAME [--id ID] [--data S] -- CMD`: be a member of the
//! group NAME (on ZooKeeper Curator's `GroupMember`) while CMD runs; CMD
//! is stopped when the membership is lost, as `recipes lock` does. The id
//! is the global `--id` (default: host name and pid).

use clap::Args;

use crate::cli::RunOptions;

/// `recipes join`.
#[derive(Debug, Args)]
pub struct JoinArgs {
    /// The group: a path such as /services/api.
    pub name: String,
    /// The member's data, as others read it (e.g. its address; at most
    /// 65536 bytes).
    #[arg(long, value_name = "S")]
    pub data: Option<String>,
    /// (--wait and --no-wait do not apply: a join never waits; an id
    /// another member holds exits 64.)
    #[command(flatten)]
    #[allow(missing_docs)]
    pub run: RunOptions,
}
