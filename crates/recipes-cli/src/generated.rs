//! `recipes completions SHELL` and `recipes man`: printed from the clap
//! definition itself, so never out of date.

use clap::{Args, CommandFactory};

use crate::cli::{Cli, Command};

/// `recipes completions`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh or fish.
    #[arg(value_name = "SHELL")]
    pub shell: CompletionShell,
}

/// The shells `recipes completions` writes for.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum CompletionShell {
    /// GNU bash.
    Bash,
    /// Z shell.
    Zsh,
    /// fish.
    Fish,
}

/// Print what `recipes completions` and `recipes man` print: generated
/// from [`Cli`]'s definition, so never out of date. Generated in memory
/// first: clap_complete panics on a failed write.
///
/// # Errors
///
/// When stdout cannot be written.
pub fn print_generated(command: &Command) -> std::io::Result<()> {
    let mut cmd = Cli::command();
    let mut text = Vec::new();
    match command {
        Command::Completions(a) => {
            use clap_complete::{generate, Shell};
            let shell = match a.shell {
                CompletionShell::Bash => Shell::Bash,
                CompletionShell::Zsh => Shell::Zsh,
                CompletionShell::Fish => Shell::Fish,
            };
            generate(shell, &mut cmd, "recipes", &mut text);
        }
        _ => clap_mangen::Man::new(cmd).render(&mut text)?,
    }
    crate::out::print_bytes(&text)
}
