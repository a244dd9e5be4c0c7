//! Durations as operators type them on every command (`500ms`, `30s`, `1m30s`, `1h`), read by
//! humantime, above zero and at most a day.

use std::time::Duration;

use ferry_host::admin::wire::MAX_DEADLINE;

/// What every duration flag takes, for error messages.
const USAGE: &str = "write a number with its unit, such as 500ms, 30s, 1m30s or 1h";

/// Reads a duration such as `500ms`, `30s`, `1m30s` or `1h`.
pub fn parse(text: &str) -> Result<Duration, String> {
    let duration = humantime::parse_duration(text)
        .map_err(|e| format!("{text:?} is no duration ({e}); {USAGE}"))?;
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
        assert_eq!(parse("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse("2m 500ms"), Ok(Duration::from_millis(120_500)));
        for bad in [
            "30",
            "s",
            "25h",
            "2d",
            "-1s",
            "0s",
            "1441m",
            "99999999999999999999s",
        ] {
            assert!(parse(bad).is_err(), "{bad} accepted");
        }
    }
}
