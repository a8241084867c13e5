//! Calendar arithmetic for the temporal and environment sections: Unix milliseconds plus a
//! fixed offset to a civil date, time and day of week, without a time-zone database.

use crate::inputs::TimeZone;

/// A civil date and time in some zone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CivilTime {
    /// Year (proleptic Gregorian).
    pub year: i64,
    /// Month, 1-12.
    pub month: u8,
    /// Day of month, 1-31.
    pub day: u8,
    /// Hour, 0-23.
    pub hour: u8,
    /// Minute, 0-59.
    pub minute: u8,
    /// Day of week, 0 = Monday ... 6 = Sunday.
    pub weekday: u8,
}

const WEEKDAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

impl CivilTime {
    /// The civil time of `unix_ms` at `offset_minutes` east of UTC.
    pub fn at(unix_ms: i64, offset_minutes: i32) -> CivilTime {
        let local_min = unix_ms.div_euclid(60_000) + i64::from(offset_minutes);
        let days = local_min.div_euclid(1_440);
        let min_of_day = local_min.rem_euclid(1_440);
        // 1970-01-01 was a Thursday (index 3 with Monday = 0).
        let weekday = (days + 3).rem_euclid(7) as u8;
        // Days to civil date (the era-based method: 400-year eras of 146,097 days).
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097);
        let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = (doy - (153 * mp + 2) / 5 + 1) as u8;
        let month = if mp < 10 { mp + 3 } else { mp - 9 } as u8;
        let year = yoe + era * 400 + i64::from(month <= 2);
        CivilTime {
            year,
            month,
            day,
            hour: (min_of_day / 60) as u8,
            minute: (min_of_day % 60) as u8,
            weekday,
        }
    }

    /// The English name of the day of week.
    pub fn weekday_name(&self) -> &'static str {
        WEEKDAYS[usize::from(self.weekday % 7)]
    }

    /// `YYYY-MM-DD`.
    pub fn date(&self) -> String {
        format!("{:04}-{:02}-{:02}", self.year, self.month, self.day)
    }

    /// `HH:MM`.
    pub fn time(&self) -> String {
        format!("{:02}:{:02}", self.hour, self.minute)
    }
}

/// `+HH:MM` / `-HH:MM` for an offset in minutes.
pub(crate) fn offset_text(offset_minutes: i32) -> String {
    let sign = if offset_minutes < 0 { '-' } else { '+' };
    let m = offset_minutes.unsigned_abs();
    format!("{sign}{:02}:{:02}", m / 60, m % 60)
}

/// `YYYY-MM-DD HH:MM (UTC+HH:MM, name)` for `unix_ms` in `zone`.
pub fn format_local(unix_ms: i64, zone: &TimeZone) -> String {
    let t = CivilTime::at(unix_ms, zone.offset_minutes);
    format!(
        "{} {} (UTC{}, {})",
        t.date(),
        t.time(),
        offset_text(zone.offset_minutes),
        zone.name
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_dates() {
        let t = CivilTime::at(0, 0);
        assert_eq!(
            (t.date(), t.time(), t.weekday_name()),
            ("1970-01-01".into(), "00:00".into(), "Thursday")
        );
        // 2026-11-21 13:20 UTC, a Saturday.
        let t = CivilTime::at(1_795_267_200_000, 0);
        assert_eq!(
            (t.date(), t.time(), t.weekday_name()),
            ("2026-11-21".into(), "13:20".into(), "Saturday")
        );
        // 2026-11-21 00:00 UTC; an hour west it is still Friday evening.
        let t = CivilTime::at(1_795_219_200_000, -60);
        assert_eq!(
            (t.date(), t.time(), t.weekday_name()),
            ("2026-11-20".into(), "23:00".into(), "Friday")
        );
        // Ten hours east of 13:20 is the next day.
        let t = CivilTime::at(1_795_267_200_000, 600);
        assert_eq!((t.date(), t.time()), ("2026-11-21".into(), "23:20".into()));
        assert_eq!(CivilTime::at(1_795_267_200_000, 660).date(), "2026-11-22");
        // Leap day and before the epoch.
        assert_eq!(CivilTime::at(951_782_400_000, 0).date(), "2000-02-29");
        assert_eq!(CivilTime::at(-86_400_000, 0).date(), "1969-12-31");
        assert_eq!(CivilTime::at(-86_400_000, 0).weekday_name(), "Wednesday");
        assert_eq!(offset_text(330), "+05:30");
        assert_eq!(offset_text(-210), "-03:30");
    }

    #[test]
    fn extreme_inputs_do_not_panic() {
        for ms in [i64::MIN, i64::MAX, -1, 1] {
            for off in [i32::MIN / 2, -1_439, 0, 1_439, i32::MAX / 2] {
                let t = CivilTime::at(ms / 1_000, off);
                assert!((1..=12).contains(&t.month) && (1..=31).contains(&t.day));
            }
        }
    }
}
