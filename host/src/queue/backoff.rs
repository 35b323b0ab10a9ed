//! Exponential backoff: the one formula every retry in the host uses.

use std::time::Duration;

/// A delay doubling from `base` with each consecutive failure, never above
/// `max` (client-go's `ItemExponentialFailureRateLimiter`).
///
/// ```
/// use std::time::Duration;
/// use rekon::queue::Backoff;
///
/// let backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(30));
/// assert_eq!(backoff.delay(1), Duration::from_secs(1));
/// assert_eq!(backoff.delay(3), Duration::from_secs(4));
/// assert_eq!(backoff.delay(20), Duration::from_secs(30));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    /// The delay after the first failure.
    pub base: Duration,
    /// The longest delay.
    pub max: Duration,
}

impl Backoff {
    /// Doubling from `base`, capped at `max`.
    #[must_use]
    pub const fn new(base: Duration, max: Duration) -> Self {
        Self { base, max }
    }

    /// The delay after the `failures`-th consecutive failure (1-based; `0`
    /// is taken as `1`): `base · 2^(failures - 1)`, at most `max`.
    #[must_use]
    pub fn delay(&self, failures: u32) -> Duration {
        let exp = failures.saturating_sub(1);
        if exp >= u32::BITS {
            return self.max;
        }
        self.base
            .checked_mul(1_u32 << exp)
            .map_or(self.max, |d| d.min(self.max))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_from_the_base_and_caps() {
        let b = Backoff::new(Duration::from_millis(5), Duration::from_secs(1000));
        assert_eq!(b.delay(0), Duration::from_millis(5));
        assert_eq!(b.delay(1), Duration::from_millis(5));
        assert_eq!(b.delay(2), Duration::from_millis(10));
        assert_eq!(b.delay(11), Duration::from_millis(5 * 1024));
        assert_eq!(b.delay(18), Duration::from_millis(5 << 17));
        assert_eq!(b.delay(19), b.max);
        assert_eq!(b.delay(32), b.max);
        assert_eq!(b.delay(33), b.max);
        assert_eq!(b.delay(u32::MAX), b.max);
    }

    #[test]
    fn a_tiny_base_still_reaches_the_cap_without_overflow() {
        let b = Backoff::new(Duration::from_nanos(1), Duration::from_secs(30));
        assert_eq!(b.delay(32), Duration::from_nanos(1 << 31));
        assert_eq!(b.delay(40), b.max);
    }
}
