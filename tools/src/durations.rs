//! Durations as operators type them on every command: a whole number with `ms`, `s`, `m` or `h`,
//! above zero and at most a day.

use std::time::Duration;

use ferry_host::admin::wire::MAX_DEADLINE;

/// What every duration flag takes, for error messages.
const USAGE: &str = "write a whole number with ms, s, m or h, such as 500ms, 30s, 2m or 1h";

/// Reads a duration such as `500ms`, `30s`, `2m` or `1h`.
pub fn parse(text: &str) -> Result<Duration, String> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("{text:?} has no unit; {USAGE}"))?;
    let (number, unit) = text.split_at(split);
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} does not start with a number; {USAGE}"))?;
    let seconds = |per: u64| Duration::from_secs(n.saturating_mul(per));
    let duration = match unit {
        "ms" => Duration::from_millis(n),
        "s" => seconds(1),
        "m" => seconds(60),
        "h" => seconds(60 * 60),
        _ => return Err(format!("{text:?} has an unknown unit {unit:?}; {USAGE}")),
    };
    if duration.is_zero() || duration > MAX_DEADLINE {
        return Err(format!(
            "{text:?} is out of range: it must be above 0 and at most 24h"
        ));
    }
    Ok(duration)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_read_with_their_unit_and_bounds() {
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse("24h"), Ok(Duration::from_secs(86_400)));
        assert_eq!(parse("1440m"), Ok(Duration::from_secs(86_400)));
        for bad in [
            "30",
            "s",
            "25h",
            "1d",
            "-1s",
            "0s",
            "1441m",
            "99999999999999999999s",
        ] {
            assert!(parse(bad).is_err(), "{bad} accepted");
        }
    }
}
