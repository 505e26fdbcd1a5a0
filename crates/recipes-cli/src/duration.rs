//! Durations on the command line: `2s`, `500ms`, `1m`, `1.5s`, `1h`.

use std::time::Duration;

/// Parse a duration with a unit (`ms`, `s`, `m`, `h`).
///
/// # Errors
///
/// A message saying what a valid duration looks like.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text.starts_with('-') {
        return Err(format!(
            "{text:?} is negative; a duration is zero or more, such as 2s, 500ms or 1m"
        ));
    }
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let scale = match unit {
        "ms" => 0.001,
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        "" => return Err(format!("{text:?} has no unit; write e.g. 2s, 500ms or 1m")),
        _ => {
            return Err(format!(
                "{text:?} has an unknown unit {unit:?}; use ms, s, m or h (e.g. 2s, 500ms, 1m)"
            ))
        }
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration; write e.g. 2s, 500ms or 1m"))?;
    Duration::try_from_secs_f64(value * scale)
        .map_err(|_| format!("{text:?} is out of range; write e.g. 2s, 500ms or 1m"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1m"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
    }

    #[test]
    fn rejects() {
        for bad in ["", "2", "s", "2x", "-1s", "1..2s"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} accepted");
        }
    }
}
