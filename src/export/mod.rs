//! Export: the protected stream sent downstream as OTLP, under the sender's attribute names.

pub mod encode;
