//! What `recipes --help` promises: every exit status the command uses,
//! and only TTLs it accepts.

use clap::CommandFactory;

use super::Cli;
use crate::duration::parse_duration;
use crate::exit;

fn long_help() -> String {
    Cli::command().render_long_help().to_string()
}

#[test]
fn help_lists_every_exit_status() {
    let help = long_help();
    let codes = [
        exit::USAGE,
        exit::UNAVAILABLE,
        exit::OS_ERROR,
        exit::CONFLICT,
        exit::LOST,
        exit::NO_PERMISSION,
        exit::CONFIG,
        exit::CANNOT_EXECUTE,
        exit::NOT_FOUND,
    ];
    for code in codes {
        let listed = help.lines().any(|l| {
            l.trim_start().starts_with(&code.to_string()) || l.contains(&format!(" {code} "))
        });
        assert!(listed, "exit status {code} is not in --help:\n{help}");
    }
}

#[test]
fn the_ttls_help_offers_are_accepted() {
    let help = long_help();
    let ttl = help
        .split("--ttl <DURATION>")
        .nth(1)
        .and_then(|rest| rest.split("[env: RECIPES_TTL").next())
        .expect("--ttl in --help");
    let examples = ttl
        .rsplit_once('(')
        .and_then(|(_, e)| e.split_once(')'))
        .map(|(e, _)| e)
        .expect("--ttl's examples in parentheses");
    for example in examples.split(',').map(str::trim) {
        let d = parse_duration(example).unwrap_or_else(|e| panic!("{example}: {e}"));
        assert!(
            (recipes_core::MIN_TTL..=recipes_core::MAX_DURATION).contains(&d),
            "--help offers the TTL {example}, which a client refuses"
        );
    }
}
