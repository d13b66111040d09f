//! The error every `roundtrip db` step returns.

use crate::probe::target::TargetError;
use std::net::SocketAddr;
use thiserror::Error;

/// What went wrong. Every message names the operation, the address and what to try; none contains a password.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum DbError {
    /// The URL cannot be understood.
    #[error(
        "invalid database URL '{url}': {detail} (expected SCHEME://[USER[:PASSWORD]@]HOST[:PORT][/DATABASE] with SCHEME postgres, mysql, mariadb, redis, rediss or oracle)"
    )]
    Url {
        /// The URL, password replaced by `***`.
        url: String,
        /// What is wrong.
        detail: String,
    },
    /// A setting is out of range.
    #[error("{0}")]
    Config(String),
    /// The host cannot be resolved.
    #[error(transparent)]
    Target(#[from] TargetError),
    /// TCP connect failed.
    #[error(
        "cannot connect to {proto} at {addr}: {detail} (is the server running and listening on that port?)"
    )]
    Connect {
        /// Protocol name.
        proto: &'static str,
        /// Address.
        addr: SocketAddr,
        /// The system's message.
        detail: String,
    },
    /// No answer in time.
    #[error(
        "{proto} at {addr} did not answer within {timeout_ms} ms during {during} (raise --timeout, or check the server)"
    )]
    Timeout {
        /// Protocol name.
        proto: &'static str,
        /// Address.
        addr: SocketAddr,
        /// What was going on.
        during: String,
        /// The timeout.
        timeout_ms: u128,
    },
    /// The server closed the connection.
    #[error(
        "{proto} at {addr} closed the connection during {during}{detail} (was the session killed, or the server restarted? see the server log)"
    )]
    Closed {
        /// Protocol name.
        proto: &'static str,
        /// Address.
        addr: SocketAddr,
        /// What was going on.
        during: String,
        /// The server's last words, if any (": terminating connection ...").
        detail: String,
    },
    /// Authentication failed.
    #[error(
        "{proto} at {addr} rejected user '{user}': {message} (check the user name and password: {hint})"
    )]
    Auth {
        /// Protocol name.
        proto: &'static str,
        /// Address.
        addr: SocketAddr,
        /// User name.
        user: String,
        /// The server's message.
        message: String,
        /// Where passwords come from.
        hint: &'static str,
    },
    /// The server wants a password and none was given.
    #[error("{proto} at {addr} wants a password for user '{user}' and none was given ({hint})")]
    NoPassword {
        /// Protocol name.
        proto: &'static str,
        /// Address.
        addr: SocketAddr,
        /// User name.
        user: String,
        /// Where passwords come from.
        hint: &'static str,
    },
    /// The database does not exist.
    #[error(
        "{proto} at {addr} has no database '{database}': {message} (check the database part of the URL)"
    )]
    UnknownDatabase {
        /// Protocol name.
        proto: &'static str,
        /// Address.
        addr: SocketAddr,
        /// The database asked for.
        database: String,
        /// The server's message.
        message: String,
    },
    /// The server answered a statement with an error.
    #[error("{proto} at {addr} answered {during} with an error: {message}")]
    Server {
        /// Protocol name.
        proto: &'static str,
        /// Address.
        addr: SocketAddr,
        /// What was going on.
        during: String,
        /// The server's message.
        message: String,
    },
    /// TLS is required and the server does not offer it.
    #[error(
        "{proto} at {addr} does not offer TLS, but {setting} requires it (enable TLS on the server, or use sslmode=prefer or disable)"
    )]
    TlsNotOffered {
        /// Protocol name.
        proto: &'static str,
        /// Address.
        addr: SocketAddr,
        /// The setting that asked for TLS.
        setting: &'static str,
    },
    /// The TLS handshake failed.
    #[error(
        "TLS with {proto} at {addr} failed: {detail} (check the server certificate; sslmode=require encrypts without verifying it)"
    )]
    Tls {
        /// Protocol name.
        proto: &'static str,
        /// Address.
        addr: SocketAddr,
        /// What went wrong.
        detail: String,
    },
    /// The server insists on an encrypted connection and this one is not.
    #[error(
        "{proto} at {addr} requires an encrypted connection: {message} (use ssl-mode=REQUIRED, or leave ssl-mode at PREFERRED, the default)"
    )]
    TlsRequired {
        /// Protocol name.
        proto: &'static str,
        /// Address.
        addr: SocketAddr,
        /// The server's message.
        message: String,
    },
    /// The password must go to the server encrypted with its RSA key, and that cannot be done safely.
    #[error(
        "{proto} at {addr} wants the password for {plugin} encrypted with its RSA public key, but {detail} (use TLS: ssl-mode=REQUIRED, or give the key with server-public-key-path=FILE)"
    )]
    RsaKey {
        /// Protocol name.
        proto: &'static str,
        /// Address.
        addr: SocketAddr,
        /// The authentication plugin.
        plugin: String,
        /// Why not.
        detail: String,
    },
    /// The peer said something this protocol does not allow.
    #[error(
        "unexpected answer from {addr} during {during}: {detail} (is this really a {proto} server on that port?)"
    )]
    Protocol {
        /// Protocol name.
        proto: &'static str,
        /// Address.
        addr: SocketAddr,
        /// What was going on.
        during: String,
        /// What was wrong.
        detail: String,
    },
    /// A database link cannot be used (extension or engine missing, the link's rule); never a password.
    #[error("{proto} at {addr}: {message}")]
    Link {
        /// Protocol name.
        proto: &'static str,
        /// Address of the local database.
        addr: SocketAddr,
        /// What is wrong and what to do.
        message: String,
    },
    /// The server asks for something roundtrip does not implement.
    #[error("{proto} at {addr} asks for {what}, which roundtrip does not support ({hint})")]
    Unsupported {
        /// Protocol name.
        proto: &'static str,
        /// Address.
        addr: SocketAddr,
        /// What it asked for.
        what: String,
        /// What to do.
        hint: &'static str,
    },
}
