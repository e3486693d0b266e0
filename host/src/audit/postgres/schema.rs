//! The database schema, created and migrated by the host, one numbered step at a time.
//!
//! The schema's version is a row of `approval_schema`; each step runs in a transaction that also
//! moves the version, so a migration interrupted half-way leaves the previous version whole, and
//! two hosts migrating at once serialise on that row. A host refuses a database whose schema is
//! newer than it knows (an older binary would misread it) or older (until `db migrate`, or a
//! start with `--migrate`).
//!
//! The SQL is plain PostgreSQL that PostgreSQL-compatible distributed databases also accept: no
//! advisory locks, no LISTEN/NOTIFY, no extensions.

/// Each step, in order: the version it brings the schema to, and its statements.
pub const MIGRATIONS: &[(i32, &str)] = &[
    (
        1,
        "CREATE TABLE approval_records (
        session   TEXT        NOT NULL,
        seq       BIGINT      NOT NULL,
        line      TEXT        NOT NULL,
        stored_at TIMESTAMPTZ NOT NULL DEFAULT now(),
        PRIMARY KEY (session, seq)
    );
    CREATE TABLE approval_leases (
        session    TEXT        PRIMARY KEY,
        owner      TEXT        NOT NULL,
        expires_at TIMESTAMPTZ NOT NULL
    );",
    ),
    // Which host wrote each record (the lease owner's label): who to ask when a fleet's audit
    // shows something odd. Rows from version 1 have none.
    (
        2,
        "ALTER TABLE approval_records ADD COLUMN written_by TEXT;",
    ),
];

/// The version this host reads and writes.
pub const CURRENT_VERSION: i32 = MIGRATIONS[MIGRATIONS.len() - 1].0;

/// Makes sure the version table and its one row exist (version 0 on an empty database).
pub const ENSURE_VERSION_TABLE: &str = "CREATE TABLE IF NOT EXISTS approval_schema (
        id      INT PRIMARY KEY,
        version INT NOT NULL
    );
    INSERT INTO approval_schema (id, version) VALUES (1, 0) ON CONFLICT (id) DO NOTHING;";

/// Reads the version, locking its row for the rest of the transaction.
pub const LOCK_VERSION: &str = "SELECT version FROM approval_schema WHERE id = 1 FOR UPDATE";

/// Reads the version without creating anything.
pub const READ_VERSION: &str = "SELECT version FROM approval_schema WHERE id = 1";

/// Moves the version.
pub const SET_VERSION: &str = "UPDATE approval_schema SET version = $1 WHERE id = 1";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_numbered_from_one_without_gaps() {
        for (i, (version, _)) in MIGRATIONS.iter().enumerate() {
            assert_eq!(*version, i as i32 + 1);
        }
    }
}
