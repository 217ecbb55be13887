//! The archive's tables: which there are ([`Table`]), the one interface through which a stage's
//! rows reach them ([`rows`]), the Arrow schemas of `spans` and `logs` ([`schema`]; the stages
//! owning the other tables define theirs) and the Parquet encoding of their files
//! ([`encoding`]).

pub mod encoding;
pub mod rows;
pub mod schema;

/// The archive tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Table {
    /// `spans/`
    Spans,
    /// `logs/`
    Logs,
    /// `requests/`
    Requests,
    /// `alarms/`
    Alarms,
    /// `findings/`
    Findings,
}

impl Table {
    /// Every table.
    pub const ALL: [Table; 5] = [
        Table::Spans,
        Table::Logs,
        Table::Requests,
        Table::Alarms,
        Table::Findings,
    ];

    /// Folder and table name.
    pub fn as_str(self) -> &'static str {
        match self {
            Table::Spans => "spans",
            Table::Logs => "logs",
            Table::Requests => "requests",
            Table::Alarms => "alarms",
            Table::Findings => "findings",
        }
    }
}
