//! Scheduling work: the work queue every controller drives (the plugins'
//! controllers and the Plugin-object source) and the exponential backoff
//! every retry in the host uses. Pure data structures: nothing here
//! imports the rest of the crate.

pub mod backoff;
pub mod work_queue;

pub use backoff::Backoff;
pub use work_queue::{Action, Done, QueueKey, ReqKey, WorkQueue};
