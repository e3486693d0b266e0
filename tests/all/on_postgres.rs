//! The seam, log contract and rules suites again, on PostgreSQL: the same test files, with a `Host` over a
//! fresh schema of the database `.ci/with-postgres` provides. Two hosts on one database stand
//! where the directory suites have two processes on one state directory.

// The same files as `crate::rules` and `crate::seam`, on purpose: one suite, two stores.
#![allow(clippy::duplicate_mod)]

mod support {
    pub use crate::support::pg::PgHost as Host;
    pub use crate::support::pg::PgLogFixture as LogFixture;
    pub use crate::support::*;
}

#[path = "log_contract.rs"]
mod log_contract;
#[path = "rules.rs"]
mod rules;
#[path = "seam.rs"]
mod seam;
