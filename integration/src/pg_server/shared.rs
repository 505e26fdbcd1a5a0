//! A [`PgServer`] that the test processes of one nextest run share (see
//! `run_shared.rs`).

use super::{PgConfig, PgServer};
use crate::run_shared::{Record, RunShared};
use crate::test_dir::TestDir;

impl RunShared for PgServer {
    type Config = PgConfig;
    const KIND: &'static str = "pg";

    fn start_shared(config: PgConfig) -> PgServer {
        PgServer::start_with(config)
    }

    fn record(&self) -> Record {
        Record::of(&self.process, self.dir.path(), vec![self.addr])
    }

    fn adopt(config: PgConfig, record: Record) -> PgServer {
        PgServer {
            addr: record.addrs[0],
            config,
            process: record.process(),
            _port: None,
            dir: TestDir::adopted(record.dir),
        }
    }
}
