//! `--user` and its password: from `RECIPES_PASSWORD` or the first line of
//! `--password-file`, never from the command line (argv is visible to every
//! user of the machine in `ps`). The password is never printed: not in
//! `Debug`, not in messages.

use std::fmt;
use std::path::Path;

/// The environment variable that may hold the password.
pub const PASSWORD_ENV: &str = "RECIPES_PASSWORD";

/// A user and its password.
#[derive(Clone)]
pub struct Credentials {
    pub user: String,
    pub password: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("user", &self.user)
            .field("password", &"<hidden>")
            .finish()
    }
}

/// The credentials `user`, `password_file` and `RECIPES_PASSWORD` give,
/// or the usage error that says what is missing.
pub fn resolve(
    user: Option<&str>,
    password_file: Option<&Path>,
) -> Result<Option<Credentials>, String> {
    let from_env = std::env::var(PASSWORD_ENV).ok().filter(|p| !p.is_empty());
    let password = match (password_file, from_env) {
        (Some(_), Some(_)) => {
            return Err(format!(
                "give the password in {PASSWORD_ENV} or --password-file, not both"
            ))
        }
        (Some(file), None) => Some(read_first_line(file)?),
        (None, env) => env,
    };
    match (user, password) {
        (None, None) => Ok(None),
        (Some(user), Some(password)) if !user.is_empty() => Ok(Some(Credentials {
            user: user.to_owned(),
            password,
        })),
        (Some(_), Some(_)) => Err("--user (RECIPES_USER) is empty; give the user's name".into()),
        (Some(user), None) => Err(format!(
            "--user {user} needs a password: put it in {PASSWORD_ENV} or in a file named by \
             --password-file (never on the command line)"
        )),
        (None, Some(_)) => Err("a password was given without --user (RECIPES_USER)".into()),
    }
}

fn read_first_line(file: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| format!("cannot read the password file {}: {e}", file.display()))?;
    match text.lines().next().map(str::trim_end) {
        Some(line) if !line.is_empty() => Ok(line.to_owned()),
        _ => Err(format!("the password file {} is empty", file.display())),
    }
}
