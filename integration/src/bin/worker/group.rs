//! The worker's group membership verbs: `join`, `member-status` (with the member's `valid_until_ms`), `leave`.

use recipes_core::Client;

use super::{boot_ms, err, usage, Reply, Worker};

impl<C: Client> Worker<C> {
    pub(crate) fn group_verb(&mut self, words: &[&str]) -> Reply {
        match words {
            ["join", name, id, rest @ ..] if rest.len() <= 1 => {
                if self.membership.is_some() {
                    return Err(usage("already a member; leave first"));
                }
                let data = rest.first().copied().unwrap_or("");
                let group = self.client.group(name).map_err(|e| err(&e))?;
                let member = group.join(id, data.as_bytes()).map_err(|e| err(&e))?;
                self.membership = Some(member);
                Ok(String::new())
            }
            ["member-status"] => {
                let m = self
                    .membership
                    .as_ref()
                    .ok_or_else(|| usage("not a member"))?;
                let lost = match m.lost().reason() {
                    None => "no".to_owned(),
                    Some(r) => format!("{r:?}"),
                };
                let until = m.lost().valid_until();
                Ok(format!("lost={lost} valid_until_ms={}", boot_ms(until)))
            }
            ["group-leave"] => {
                let m = self
                    .membership
                    .take()
                    .ok_or_else(|| usage("not a member"))?;
                m.release().map_err(|e| err(&e))?;
                Ok(String::new())
            }
            _ => Err(usage(
                "join <name> <id> [data] | member-status | group-leave",
            )),
        }
    }
}
