//! RFC 3339 timestamps to and from Unix seconds, for validity windows.
//!
//! Parsing and formatting go through the `time` crate's strict RFC 3339 format; no calendar
//! arithmetic is done here. A timestamp without an offset is refused: validity windows must be
//! unambiguous. Fractions of a second are accepted and dropped (windows are kept in whole
//! seconds, rounded towards the past).

use ::time::format_description::well_known::Rfc3339;
use ::time::OffsetDateTime;

/// Unix seconds of an RFC 3339 timestamp with an offset (`2026-01-01T00:00:00Z`).
pub fn parse_rfc3339(s: &str) -> Result<i64, String> {
    match OffsetDateTime::parse(s, &Rfc3339) {
        Ok(t) => Ok(t.unix_timestamp()),
        Err(e) => {
            // Say what is missing when the text is a date or a local time without an offset.
            let hint = if !s.contains('T') && !s.contains('t') {
                "; it needs a date, a time and an offset, such as 2026-01-01T00:00:00Z"
            } else {
                "; write it as 2026-01-01T00:00:00Z or with an offset such as +02:00"
            };
            Err(format!("`{s}` is not an RFC 3339 timestamp ({e}){hint}"))
        }
    }
}

/// RFC 3339 (UTC, `Z`) text of Unix seconds.
///
/// Instants outside the years 0000-9999, which RFC 3339 cannot write, are shown as the number
/// of seconds.
pub fn format_rfc3339(secs: i64) -> String {
    OffsetDateTime::from_unix_timestamp(secs)
        .ok()
        .and_then(|t| t.format(&Rfc3339).ok())
        .unwrap_or_else(|| format!("{secs} seconds after 1970-01-01T00:00:00Z"))
}

#[cfg(test)]
mod tests {
    use super::*;

    // The expected values below were computed outside strata, with GNU date:
    // `date -u -d '2000-02-29T00:00:00Z' +%s` and `date -u -d @951782400 --iso-8601=seconds`.

    #[test]
    fn known_instants() {
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z").unwrap(), 0);
        assert_eq!(
            parse_rfc3339("2026-11-21T00:00:00Z").unwrap(),
            1_795_219_200
        );
        assert_eq!(format_rfc3339(1_795_219_200), "2026-11-21T00:00:00Z");
        assert!(parse_rfc3339("2026-11-21").is_err());
        assert!(parse_rfc3339("2026-11-21T00:00:00").is_err());
    }

    #[test]
    fn offsets_move_the_instant_by_exactly_the_offset() {
        let utc = 1_795_219_200;
        assert_eq!(parse_rfc3339("2026-11-21T02:00:00+02:00").unwrap(), utc);
        assert_eq!(parse_rfc3339("2026-11-20T19:00:00-05:00").unwrap(), utc);
        assert_eq!(parse_rfc3339("2026-11-21T05:45:00+05:45").unwrap(), utc);
        assert_eq!(parse_rfc3339("2026-11-21T00:00:00-00:00").unwrap(), utc);
        assert_eq!(parse_rfc3339("2026-11-21t00:00:00z").unwrap(), utc);
        // An offset that crosses a year boundary.
        assert_eq!(
            parse_rfc3339("2027-01-01T01:00:00+02:00").unwrap(),
            parse_rfc3339("2026-12-31T23:00:00Z").unwrap()
        );
        // Offsets of 24 hours or more, and offsets without minutes, are not RFC 3339.
        assert!(parse_rfc3339("2026-11-21T00:00:00+24:00").is_err());
        assert!(parse_rfc3339("2026-11-21T00:00:00+02").is_err());
    }

    #[test]
    fn leap_days_exist_only_in_leap_years() {
        assert_eq!(parse_rfc3339("2000-02-29T00:00:00Z").unwrap(), 951_782_400);
        assert_eq!(format_rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(
            parse_rfc3339("2028-02-29T12:00:00Z").unwrap(),
            1_835_438_400
        );
        assert_eq!(
            parse_rfc3339("2028-03-01T00:00:00Z").unwrap()
                - parse_rfc3339("2028-02-28T00:00:00Z").unwrap(),
            2 * 86_400
        );
        // 1900 and 2100 are divisible by 100 but not 400: no 29 February.
        for bad in [
            "1900-02-29T00:00:00Z",
            "2100-02-29T00:00:00Z",
            "2026-02-29T00:00:00Z",
            "2026-02-30T00:00:00Z",
            "2026-04-31T00:00:00Z",
            "2026-13-01T00:00:00Z",
            "2026-00-10T00:00:00Z",
        ] {
            assert!(parse_rfc3339(bad).is_err(), "{bad} was accepted");
        }
    }

    #[test]
    fn the_extremes_of_the_year_range() {
        // RFC 3339 writes years 0000-9999.
        assert_eq!(
            parse_rfc3339("0000-01-01T00:00:00Z").unwrap(),
            -62_167_219_200
        );
        assert_eq!(
            parse_rfc3339("9999-12-31T23:59:59Z").unwrap(),
            253_402_300_799
        );
        assert_eq!(format_rfc3339(253_402_300_799), "9999-12-31T23:59:59Z");
        assert_eq!(format_rfc3339(-62_167_219_200), "0000-01-01T00:00:00Z");
        // An offset that would move the instant past the range still parses to the right second.
        assert_eq!(
            parse_rfc3339("9999-12-31T23:59:59-01:00").unwrap(),
            253_402_304_399
        );
        // Five-digit and negative years are not RFC 3339.
        assert!(parse_rfc3339("10000-01-01T00:00:00Z").is_err());
        assert!(parse_rfc3339("-0001-01-01T00:00:00Z").is_err());
        // Seconds RFC 3339 cannot write are still shown, never a panic.
        assert!(format_rfc3339(i64::MAX).contains("seconds after"));
        assert!(format_rfc3339(i64::MIN).contains("seconds after"));
    }

    #[test]
    fn errors_say_what_to_write() {
        let e = parse_rfc3339("2026-06-01").unwrap_err();
        assert!(e.contains("2026-01-01T00:00:00Z"), "{e}");
        let e = parse_rfc3339("2026-06-01T00:00:00").unwrap_err();
        assert!(e.contains("offset"), "{e}");
    }

    proptest::proptest! {
        #[test]
        fn round_trip(secs in -62_167_219_200i64..=253_402_300_799i64) {
            proptest::prop_assert_eq!(parse_rfc3339(&format_rfc3339(secs)).unwrap(), secs);
        }
    }
}
