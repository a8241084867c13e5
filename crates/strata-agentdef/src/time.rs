//! RFC 3339 timestamps to and from Unix seconds, for validity windows.
//!
//! Parsing goes through the `toml` crate's datetime type (which follows RFC 3339); only the
//! day arithmetic is done here. A timestamp without an offset is refused: validity windows
//! must be unambiguous.

use toml::value::{Datetime, Offset};

/// Unix seconds of an RFC 3339 timestamp with an offset (`2026-01-01T00:00:00Z`).
pub fn parse_rfc3339(s: &str) -> Result<i64, String> {
    let dt: Datetime = s
        .parse()
        .map_err(|e| format!("`{s}` is not an RFC 3339 timestamp: {e}"))?;
    let (Some(date), Some(time), Some(offset)) = (dt.date, dt.time, dt.offset) else {
        return Err(format!(
            "`{s}` needs a date, a time and an offset such as Z"
        ));
    };
    let days = days_from_civil(
        i64::from(date.year),
        i64::from(date.month),
        i64::from(date.day),
    );
    let secs = days * 86_400
        + i64::from(time.hour) * 3_600
        + i64::from(time.minute) * 60
        + i64::from(time.second);
    let off = match offset {
        Offset::Z => 0,
        Offset::Custom { minutes } => i64::from(minutes) * 60,
    };
    Ok(secs - off)
}

/// RFC 3339 (UTC, `Z`) text of Unix seconds.
pub fn format_rfc3339(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3_600,
        rem % 3_600 / 60,
        rem % 60
    )
}

// Howard Hinnant's days-from-civil algorithm (proleptic Gregorian calendar).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_instants() {
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z").unwrap(), 0);
        assert_eq!(
            parse_rfc3339("2026-11-21T00:00:00Z").unwrap(),
            1_795_219_200
        );
        assert_eq!(
            parse_rfc3339("2026-11-21T02:00:00+02:00").unwrap(),
            1_795_219_200
        );
        assert_eq!(format_rfc3339(1_795_219_200), "2026-11-21T00:00:00Z");
        assert!(parse_rfc3339("2026-11-21").is_err());
        assert!(parse_rfc3339("2026-11-21T00:00:00").is_err());
    }

    proptest::proptest! {
        #[test]
        fn round_trip(secs in -62_135_596_800i64..253_402_300_799i64) {
            proptest::prop_assert_eq!(parse_rfc3339(&format_rfc3339(secs)).unwrap(), secs);
        }
    }
}
