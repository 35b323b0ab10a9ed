//! Translation between the values `bindgen!` generates for the contract's
//! `types` interface and their host twins in [`crate::action`].
//!
//! The two have the same shape field by field (the host types are written
//! from `wit/types.wit`); a field added to the WIT without its twin fails to
//! compile here, which is the point. Only the runtime sees generated types:
//! everything above speaks [`crate::action`].

use super::bindings::types as wit;
use crate::action as host;

/// A value converted to its twin on the other side of the boundary.
pub(crate) trait Convert<T> {
    fn convert(self) -> T;
}

macro_rules! same {
    ($($t:ty),*) => {$(
        impl Convert<$t> for $t {
            fn convert(self) -> $t {
                self
            }
        }
    )*};
}
same!(String, bool, u32, u64, i64);

impl<A: Convert<B>, B> Convert<Option<B>> for Option<A> {
    fn convert(self) -> Option<B> {
        self.map(Convert::convert)
    }
}

impl<A: Convert<B>, B> Convert<Vec<B>> for Vec<A> {
    fn convert(self) -> Vec<B> {
        self.into_iter().map(Convert::convert).collect()
    }
}

/// Both directions for a record: every field converted.
macro_rules! record {
    ($name:ident { $($field:ident),* $(,)? }) => {
        impl Convert<host::$name> for wit::$name {
            fn convert(self) -> host::$name {
                host::$name { $($field: self.$field.convert()),* }
            }
        }
        impl Convert<wit::$name> for host::$name {
            fn convert(self) -> wit::$name {
                wit::$name { $($field: self.$field.convert()),* }
            }
        }
    };
}

/// Both directions for a variant (or enum): cases without a payload, then
/// cases with one.
macro_rules! variant {
    ($name:ident { $($unit:ident),* ; $($case:ident),* $(,)? }) => {
        impl Convert<host::$name> for wit::$name {
            fn convert(self) -> host::$name {
                match self {
                    $(wit::$name::$unit => host::$name::$unit,)*
                    $(wit::$name::$case(v) => host::$name::$case(v.convert()),)*
                }
            }
        }
        impl Convert<wit::$name> for host::$name {
            fn convert(self) -> wit::$name {
                match self {
                    $(host::$name::$unit => wit::$name::$unit,)*
                    $(host::$name::$case(v) => wit::$name::$case(v.convert()),)*
                }
            }
        }
    };
}

variant!(Scope { Namespaced, Cluster; });
record!(Resource {
    group,
    version,
    kind,
    plural,
    scope
});
variant!(ClusterSet { Primary, All, Others; Named });
record!(Request {
    cluster,
    namespace,
    name
});
variant!(Phase { Live, Deleting, Leaving; });
record!(OwnerLabels {
    cluster,
    namespace,
    name
});
variant!(Mapping { Itself, OwnerReference, AllPrimaries, Custom; OwnerLabels, LabelKeyPrefixes });
record!(Watch {
    resource,
    clusters,
    mapping,
    label_selector
});
record!(Permission {
    resource,
    verbs,
    status,
    clusters
});
record!(Registration {
    name,
    version,
    primary,
    primary_clusters,
    primary_selector,
    clusters,
    watches,
    finalizer,
    permissions,
    crds,
    max_concurrent_reconciles,
});
record!(ObjectRef {
    cluster,
    resource,
    namespace,
    name
});
record!(ApplyAction {
    cluster,
    object,
    status,
    force
});
variant!(PatchType { Merge, Json; });
record!(PatchAction {
    target,
    patch_type,
    patch,
    resource_version,
    status
});
variant!(Propagation { Background, Foreground, Orphan; });
record!(DeleteAction {
    target,
    uid,
    propagation
});
record!(CreateAction { cluster, object });
variant!(EventType { Normal, Warning; });
record!(EventAction {
    regarding,
    event_type,
    reason,
    action,
    note
});
variant!(Action { ; Apply, Patch, Delete, Create, Event });
record!(Outcome {
    actions,
    requeue_after_ms,
    finalized
});
variant!(ClusterHealth { Ready, Syncing, Unreachable; });
record!(ClusterInfo {
    name,
    primary,
    health
});
record!(Timestamp {
    seconds,
    nanoseconds
});
