//! Value parsers for whole-number options. clap's own answer `-1` or `abc` with "invalid digit
//! found in string", which names neither what the number counts nor what is accepted; these
//! say both, `expected a whole number of samples, at least 1 (got '-1')`, after clap's
//! "invalid value '-1' for '--samples <SAMPLES>'". Options using them also set
//! `allow_negative_numbers`: otherwise clap takes `-1` for an unknown flag and never asks.

use std::ops::{Bound, RangeBounds};

/// An integer type a whole-number option may hold.
pub trait Whole: TryFrom<u64> + Clone + Send + Sync + 'static {
    /// The type's largest value: a range without an upper end stops here.
    const MAX: u64;
}

macro_rules! whole_types {
    ($($t:ty),*) => {
        $(impl Whole for $t {
            const MAX: u64 = <$t>::MAX as u64;
        })*
    };
}
whole_types!(u16, u32, u64, usize, i32);

/// A parser for `what` (a noun phrase: "a process id", "a node number") within `range`.
pub fn whole<T: Whole>(
    what: impl Into<String>,
    range: impl RangeBounds<u64>,
) -> impl Fn(&str) -> Result<T, String> + Clone + Send + Sync + 'static {
    let what = what.into();
    let min = match range.start_bound() {
        Bound::Included(&n) => n,
        Bound::Excluded(&n) => n.saturating_add(1),
        Bound::Unbounded => 0,
    };
    let max = match range.end_bound() {
        Bound::Included(&n) => n,
        Bound::Excluded(&n) => n.saturating_sub(1),
        Bound::Unbounded => u64::MAX,
    }
    .min(T::MAX);
    let open_ended = max == T::MAX;
    let accepted = match (open_ended, min) {
        (true, 0) => "0 or more".to_string(),
        (true, _) => format!("at least {min}"),
        (false, _) => format!("{min} to {max}"),
    };
    move |s: &str| {
        let t = s.trim();
        if let Some(v) = t
            .parse::<u64>()
            .ok()
            .filter(|n| (min..=max).contains(n))
            .and_then(|n| T::try_from(n).ok())
        {
            return Ok(v);
        }
        // a whole number past the type's end: "at least 1" alone would not say what is wrong
        let too_big = open_ended
            && !t.is_empty()
            && t.bytes().all(|b| b.is_ascii_digit())
            && t.parse::<u64>().map_or(true, |n| n > max);
        let limit = if too_big {
            format!(", at most {max}")
        } else {
            String::new()
        };
        Err(format!("expected {what}, {accepted}{limit} (got '{s}')"))
    }
}

/// `--pid`: a running process's id. 0 is refused with the negatives: to move_pages and
/// perf_event_open, pid 0 is the caller itself, numalab.
pub fn pid() -> impl Fn(&str) -> Result<i32, String> + Clone + Send + Sync + 'static {
    whole("the pid of a running process (see ps or pgrep)", 1..)
}

/// A parser for a whole number of `unit` ("samples", "threads") within `range`.
pub fn count<T: Whole>(
    unit: &str,
    range: impl RangeBounds<u64>,
) -> impl Fn(&str) -> Result<T, String> + Clone + Send + Sync + 'static {
    whole(format!("a whole number of {unit}"), range)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepted_values_parse_and_the_others_say_what_is_accepted() {
        let samples = count::<u64>("samples", 1..);
        assert_eq!(samples("5"), Ok(5));
        assert_eq!(samples(" 7 "), Ok(7));
        for bad in ["-1", "0", "abc", "", "1.5"] {
            assert_eq!(
                samples(bad),
                Err(format!(
                    "expected a whole number of samples, at least 1 (got '{bad}')"
                ))
            );
        }
        assert_eq!(
            samples("99999999999999999999"),
            Err("expected a whole number of samples, at least 1, at most 18446744073709551615 (got '99999999999999999999')".into())
        );
        let period = count::<u64>("memory references per sample", 0..);
        assert_eq!(period("0"), Ok(0));
        assert_eq!(
            period("-1"),
            Err(
                "expected a whole number of memory references per sample, 0 or more (got '-1')"
                    .into()
            )
        );
        let cycles = count::<u32>("cycles", 3..=65535);
        assert_eq!(cycles("3"), Ok(3));
        assert_eq!(cycles("65535"), Ok(65535));
        assert_eq!(
            cycles("65536"),
            Err("expected a whole number of cycles, 3 to 65535 (got '65536')".into())
        );
        let node = whole::<u16>("a node number", ..);
        assert_eq!(node("65535"), Ok(65535));
        assert_eq!(
            node("65536"),
            Err("expected a node number, 0 or more, at most 65535 (got '65536')".into())
        );
        let pid = pid();
        assert_eq!(pid("4194303"), Ok(4_194_303));
        assert_eq!(
            pid("0"),
            Err(
                "expected the pid of a running process (see ps or pgrep), at least 1 (got '0')"
                    .into()
            )
        );
        assert!(pid("2147483648")
            .unwrap_err()
            .contains("at most 2147483647"));
    }
}
