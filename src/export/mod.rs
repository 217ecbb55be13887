//! STUB
pub mod config;
pub mod consumer;
pub mod encode;
pub mod endpoint;
