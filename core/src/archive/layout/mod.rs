//! Where the archive's files lie and who may touch them: the partitions of the tables and
//! their completed files ([`partition`]), what a completed file's name says ([`names`]), the
//! offload marker ([`offloaded`]), and the partition locks and the compaction work area
//! ([`lock`]), both outside the tables' folders.

pub mod lock;
pub mod names;
pub mod offloaded;
pub mod partition;
