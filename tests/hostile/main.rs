//! Hostile input, secrets and stalls (issue 34), one module per class: files never created through a symlink,
//! secrets kept out of statement text, timeouts that reach the far side, bounded parsers, escaped terminal output,
//! API fields inside their flags' bounds, the live ring that keeps what it has room for, no packet off this
//! machine. Each test is named for the claim SECURITY.md makes and was seen to fail before its fix.

mod claims_agent;
mod claims_server;
#[path = "../common/mod.rs"]
mod common;
mod dblink;
mod files;
mod filterparse;
mod misc;
mod ring;
mod r#struct;
