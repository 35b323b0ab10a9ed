//! CPU as a fair share: a plugin stopped at its bounds again and again
//! (its call deadline above all: each one took a deadline's worth of CPU
//! from everyone) is backed off as a whole, not per object. After
//! [`FairShareConfig::after`] containments within
//! [`FairShareConfig::window`] its calls are admitted one per interval
//! ([`FairShareConfig::interval`], doubling with every further
//! containment up to [`FairShareConfig::max_interval`]); as many calls in
//! a row that end within bounds lift it. A spinning plugin then takes at
//! most `call timeout / (call timeout + interval)` of one core, whatever
//! concurrency it declares, and its neighbours' calls are never held.
//!
//! The book is pure (the caller passes the time); [`super::containment`]
//! feeds it, the controller asks it before every reconcile
//! ([`super::LoadedPlugin::admit`]) and puts a key it may not run yet
//! back on the queue, holding nothing meanwhile. Written here rather than
//! with a rate-limiter crate (governor): the rate is not fixed but follows
//! the plugin's behaviour, and admission has to say how long to wait
//! without sleeping.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// When a plugin is backed off, and how far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FairShareConfig {
    /// Containments within `window` that back a plugin off; as many calls
    /// in a row within bounds lift it. Zero: never back off.
    pub after: u32,
    /// How far back containments count.
    pub window: Duration,
    /// The interval between two admitted calls when first backed off.
    pub interval: Duration,
    /// The longest interval (it doubles with each further containment).
    pub max_interval: Duration,
}

impl Default for FairShareConfig {
    fn default() -> Self {
        Self {
            after: 3,
            window: Duration::from_secs(60),
            // Twice the default call deadline (2 s): a spinner takes at
            // most a third of one core once backed off.
            interval: Duration::from_secs(4),
            max_interval: Duration::from_secs(60),
        }
    }
}

/// The interval between admitted calls at backoff `level` (> 0).
fn interval(config: &FairShareConfig, level: u32) -> Duration {
    let doubled = config
        .interval
        .saturating_mul(1 << level.saturating_sub(1).min(16));
    doubled.min(config.max_interval.max(config.interval))
}

/// What a containment or a call within bounds changed of a plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transition {
    /// Backed off: one call per interval from now on.
    Entered(Duration),
    /// Backed off further.
    Escalated(Duration),
    /// Backoff lifted.
    Lifted,
}

#[derive(Debug, Default)]
struct Share {
    /// Containments within the window (backing off), oldest first.
    hits: VecDeque<Instant>,
    /// 0: not backed off; n: the interval is `interval × 2^(n-1)`.
    level: u32,
    /// Calls in a row within bounds while backed off.
    clean: u32,
    /// When the next call may start.
    next: Option<Instant>,
}

/// The book of every plugin's share.
#[derive(Debug, Default)]
pub(crate) struct FairShare {
    config: FairShareConfig,
    by_plugin: HashMap<Arc<str>, Share>,
}

impl FairShare {
    pub(crate) fn new(config: FairShareConfig) -> Self {
        Self {
            config,
            by_plugin: HashMap::new(),
        }
    }

    fn interval(&self, level: u32) -> Duration {
        interval(&self.config, level)
    }

    /// A call of `plugin` was stopped at a bound at `now`.
    pub(crate) fn contained(&mut self, plugin: &Arc<str>, now: Instant) -> Option<Transition> {
        if self.config.after == 0 {
            return None;
        }
        let (window, after, config) = (self.config.window, self.config.after, self.config);
        let share = self.by_plugin.entry(Arc::clone(plugin)).or_default();
        share.hits.push_back(now);
        while share
            .hits
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) > window)
        {
            share.hits.pop_front();
        }
        share.clean = 0;
        let entered = share.level == 0;
        if entered && share.hits.len() < after as usize {
            return None;
        }
        let was = share.level;
        share.level = share.level.saturating_add(1);
        let now_interval = interval(&config, share.level);
        share.next = Some(now + now_interval);
        if entered {
            Some(Transition::Entered(now_interval))
        } else if interval(&config, was) < now_interval {
            Some(Transition::Escalated(now_interval))
        } else {
            None
        }
    }

    /// A call of `plugin` ended within bounds.
    pub(crate) fn within_bounds(&mut self, plugin: &str) -> Option<Transition> {
        let after = self.config.after;
        let share = self.by_plugin.get_mut(plugin)?;
        if share.level == 0 {
            return None;
        }
        share.clean += 1;
        if share.clean < after {
            return None;
        }
        *share = Share::default();
        Some(Transition::Lifted)
    }

    /// Whether a call of `plugin` may start at `now`; if not, how long
    /// until it may. An admitted call of a backed-off plugin takes the
    /// interval's turn.
    pub(crate) fn admit(&mut self, plugin: &str, now: Instant) -> Result<(), Duration> {
        let Some(share) = self.by_plugin.get(plugin).filter(|s| s.level > 0) else {
            return Ok(());
        };
        let (level, next) = (share.level, share.next);
        if let Some(next) = next.filter(|n| *n > now) {
            return Err(next - now);
        }
        let interval = self.interval(level);
        if let Some(share) = self.by_plugin.get_mut(plugin) {
            share.next = Some(now + interval);
        }
        Ok(())
    }

    /// `plugin`'s interval between calls now (zero: not backed off).
    pub(crate) fn backoff(&self, plugin: &str) -> Duration {
        self.by_plugin
            .get(plugin)
            .filter(|s| s.level > 0)
            .map_or(Duration::ZERO, |s| self.interval(s.level))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> FairShareConfig {
        FairShareConfig {
            after: 3,
            window: Duration::from_secs(60),
            interval: Duration::from_secs(4),
            max_interval: Duration::from_secs(16),
        }
    }

    #[test]
    fn repeated_containment_backs_a_plugin_off_and_its_neighbours_never() {
        let mut book = FairShare::new(config());
        let (hog, neighbour) = (Arc::<str>::from("hog"), Arc::<str>::from("nodepool"));
        let t0 = Instant::now();
        assert_eq!(book.contained(&hog, t0), None);
        assert_eq!(book.contained(&hog, t0), None);
        assert!(book.admit("hog", t0).is_ok(), "two are not enough");
        assert_eq!(
            book.contained(&hog, t0),
            Some(Transition::Entered(Duration::from_secs(4)))
        );
        assert_eq!(book.admit("hog", t0), Err(Duration::from_secs(4)));
        assert!(book.admit("nodepool", t0).is_ok());
        assert_eq!(book.backoff("nodepool"), Duration::ZERO);
        let _ = neighbour;
        // One call per interval.
        let t4 = t0 + Duration::from_secs(4);
        assert!(book.admit("hog", t4).is_ok());
        assert_eq!(book.admit("hog", t4), Err(Duration::from_secs(4)));
    }

    #[test]
    fn containments_outside_the_window_do_not_count() {
        let mut book = FairShare::new(config());
        let hog = Arc::<str>::from("hog");
        let t0 = Instant::now();
        book.contained(&hog, t0);
        book.contained(&hog, t0 + Duration::from_secs(30));
        assert_eq!(book.contained(&hog, t0 + Duration::from_secs(61)), None);
        assert!(book.admit("hog", t0 + Duration::from_secs(61)).is_ok());
    }

    #[test]
    fn each_further_containment_doubles_the_interval_up_to_its_maximum() {
        let mut book = FairShare::new(config());
        let hog = Arc::<str>::from("hog");
        let t = Instant::now();
        for _ in 0..3 {
            book.contained(&hog, t);
        }
        assert_eq!(
            book.contained(&hog, t),
            Some(Transition::Escalated(Duration::from_secs(8)))
        );
        assert_eq!(
            book.contained(&hog, t),
            Some(Transition::Escalated(Duration::from_secs(16)))
        );
        assert_eq!(book.contained(&hog, t), None, "at its maximum");
        assert_eq!(book.backoff("hog"), Duration::from_secs(16));
    }

    #[test]
    fn calls_within_bounds_in_a_row_lift_the_backoff() {
        let mut book = FairShare::new(config());
        let hog = Arc::<str>::from("hog");
        let t = Instant::now();
        for _ in 0..3 {
            book.contained(&hog, t);
        }
        assert_eq!(book.within_bounds("hog"), None);
        assert_eq!(book.within_bounds("hog"), None);
        book.contained(&hog, t); // the streak starts over
        assert_eq!(book.within_bounds("hog"), None);
        assert_eq!(book.within_bounds("hog"), None);
        assert_eq!(book.within_bounds("hog"), Some(Transition::Lifted));
        assert!(book.admit("hog", t).is_ok());
        assert_eq!(book.backoff("hog"), Duration::ZERO);
        assert_eq!(book.contained(&hog, t), None, "counting starts over");
    }

    #[test]
    fn after_zero_never_backs_off() {
        let mut book = FairShare::new(FairShareConfig {
            after: 0,
            ..config()
        });
        let hog = Arc::<str>::from("hog");
        let t = Instant::now();
        for _ in 0..10 {
            assert_eq!(book.contained(&hog, t), None);
        }
        assert!(book.admit("hog", t).is_ok());
    }
}
