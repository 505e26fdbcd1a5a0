//! Which store the command line names: exactly one of `--zk`, `--etcd`,
//! `--pg`, `--redis` (or their environment variables), and no option of
//! another store beside it.

use clap::parser::ValueSource;
use clap::ArgMatches;

use crate::cli::Cli;

/// The one backend chosen.
#[derive(Debug, Clone)]
pub enum BackendChoice {
    /// ZooKeeper connect string.
    Zk(String),
    /// etcd endpoints.
    Etcd(Vec<String>),
    /// A PostgreSQL URL and mode.
    Pg(String, recipes_pg::PgMode),
    /// A Redis URL.
    Redis(String),
}

/// Exactly one backend. A flag beats an environment variable, including
/// another backend's: `--zk` works with `RECIPES_ETCD` set.
pub fn choose_backend(cli: &Cli, matches: &ArgMatches) -> Result<BackendChoice, String> {
    let from_flag = |id: &str| {
        let sub = matches.subcommand().map(|(_, m)| m);
        [Some(matches), sub]
            .into_iter()
            .flatten()
            .any(|m| m.value_source(id) == Some(ValueSource::CommandLine))
    };
    let given = |id: &'static str, v: &Option<String>| {
        v.as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| (id, s.to_owned()))
    };
    let mut chosen: Vec<(&str, String)> = [
        given("zk", &cli.zk),
        given("etcd", &cli.etcd),
        given("pg", &cli.pg),
        given("redis", &cli.redis),
    ]
    .into_iter()
    .flatten()
    .collect();
    if chosen.len() > 1 {
        chosen.retain(|(id, _)| from_flag(id));
    }
    let both = "give only one of --zk (RECIPES_ZK), --etcd (RECIPES_ETCD), --pg \
                (RECIPES_PG) and --redis (RECIPES_REDIS), not both";
    if let [(store, _)] = chosen.as_slice() {
        refuse_other_stores_options(store, &from_flag)?;
    }
    match chosen.as_slice() {
        [("zk", hosts)] => Ok(BackendChoice::Zk(hosts.clone())),
        [("etcd", endpoints)] => Ok(BackendChoice::Etcd(
            endpoints
                .split(',')
                .map(str::trim)
                .filter(|e| !e.is_empty())
                .map(str::to_owned)
                .collect(),
        )),
        [("pg", url)] => Ok(BackendChoice::Pg(url.clone(), cli.pg_mode)),
        [(_, url)] => Ok(BackendChoice::Redis(url.clone())),
        [] if cli.zk.is_some() || cli.etcd.is_some() || cli.pg.is_some() || cli.redis.is_some() => {
            Err(both.into())
        }
        [] => Err(
            "no backend: give --zk HOSTS (or RECIPES_ZK), --etcd ENDPOINTS (or \
                   RECIPES_ETCD), --pg URL (or RECIPES_PG) or --redis URL (or RECIPES_REDIS)"
                .into(),
        ),
        _ => Err(both.into()),
    }
}

/// The options of one store given on the command line with another
/// (`--pg-mode` with `--zk`): refused, as any unknown option is, rather
/// than ignored. The environment's are ignored: one environment may serve
/// several stores.
fn refuse_other_stores_options(store: &str, given: &dyn Fn(&str) -> bool) -> Result<(), String> {
    let own = [
        ("pg_mode", "--pg-mode", "pg", "--pg (PostgreSQL)"),
        ("zk_sasl", "--zk-sasl", "zk", "--zk (ZooKeeper)"),
    ];
    match own.iter().find(|(id, _, of, _)| *of != store && given(id)) {
        Some((_, flag, _, of)) => Err(format!(
            "{flag} is an option of {of} only, and this command uses --{store}: drop {flag}, \
             or use {of}"
        )),
        None => Ok(()),
    }
}
