//! Typed integer ids: every entity lives in an arena and is referred to by index.

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(pub u32);

        impl $name {
            #[inline]
            pub fn idx(self) -> usize {
                self.0 as usize
            }
        }
    };
}

id_type!(
    /// A task slot. Slots are recycled only after the commands naming them were drained.
    TaskId
);
id_type!(
    /// A worker slot; never reused while the scheduler lives, so stale ids stay detectable.
    WorkerId
);
id_type!(
    /// A client slot; never reused.
    ClientId
);
id_type!(
    /// A task group slot (recycled when the group empties).
    GroupId
);
id_type!(
    /// A task prefix; prefixes are never deleted so learned durations persist.
    PrefixId
);
