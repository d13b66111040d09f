//! What the client commands share: the link flags ([`ClientArgs`]: `--no-extensions`, `--psk-file`), the
//! address family flags ([`FamilyArgs`]: `-4`/`-6`), a one-target probe's tail ([`ResultArgs`]), reading a
//! client's key, and Ctrl-C handling.
//!
//! The two groups are flattened separately so each command keeps its flags in the order its help shows
//! them; a command whose `--no-extensions` gives up more than the hello says so with
//! `#[command(mut_arg("no_extensions", ...))]`.

use clap::Args;
use roundtrip::probe::target::Family;
use roundtrip::wire::auth::Psk;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// The flags of a client of a roundtrip or sockperf server: extensions and the pre-shared key.
#[derive(Debug, Args)]
pub struct ClientArgs {
    /// Behave exactly as a sockperf client: no hello.
    #[arg(long)]
    pub no_extensions: bool,
    /// Prove the pre-shared key in FILE to the server (one started with the same --psk-file), and require its
    /// proof back.
    #[arg(long, value_parser = super::args::input_file, value_name = "FILE")]
    pub psk_file: Option<PathBuf>,
}

impl ClientArgs {
    /// Whether to send roundtrip's extension hello.
    pub fn extensions(&self) -> bool {
        !self.no_extensions
    }

    /// The key, read from `--psk-file` when given.
    pub fn psk(&self) -> anyhow::Result<Option<Psk>> {
        client_psk(self.psk_file.as_deref())
    }
}

/// The `-4` / `-6` flags every network command takes.
#[derive(Debug, Args)]
pub struct FamilyArgs {
    /// IPv4 only.
    #[arg(short = '4', conflicts_with = "ipv6")]
    pub ipv4: bool,
    /// IPv6 only.
    #[arg(short = '6')]
    pub ipv6: bool,
}

impl FamilyArgs {
    /// The address family chosen.
    pub fn family(&self) -> Family {
        super::args::family(self.ipv4, self.ipv6)
    }
}

/// The tail of a one-target probe (compare, connect, icmp): `--json`, the pictures, `-4`/`-6`; and showing its
/// result ([`ResultArgs::show`]).
#[derive(Debug, Args)]
pub struct ResultArgs {
    /// Print one JSON document instead of text.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub pictures: super::report::PictureArgs,
    #[command(flatten)]
    pub family: FamilyArgs,
}

impl ResultArgs {
    /// Prints the document (`--json`) or the text `text` writes, then draws the pictures asked for, under
    /// `label`.
    pub fn show<D: serde::Serialize>(
        &self,
        doc: impl Fn() -> D,
        text: impl FnOnce() -> anyhow::Result<()>,
        label: &str,
    ) -> anyhow::Result<()> {
        if self.json {
            super::output::out(roundtrip::doc::to_bytes(&doc()))?;
        } else {
            text()?;
        }
        if self.pictures.wanted() {
            super::report::after_run(&self.pictures, &doc(), None, label)?;
        }
        Ok(())
    }
}

/// Unix seconds of `t` (0 before 1970): a document's `started_unix_s`.
pub fn unix_s(t: std::time::SystemTime) -> f64 {
    t.duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Reads `--psk-file` for a client command.
pub fn client_psk(path: Option<&Path>) -> anyhow::Result<Option<Psk>> {
    path.map(|p| Psk::from_file(p).map_err(anyhow::Error::from))
        .transpose()
}

/// Installs a Ctrl-C handler that sets `cancel`; a second Ctrl-C exits at once.
pub fn cancel_on_ctrl_c() -> Arc<AtomicBool> {
    let cancel = Arc::new(AtomicBool::new(false));
    let c = cancel.clone();
    let _ = ctrlc::set_handler(move || {
        if c.swap(true, Ordering::SeqCst) {
            std::process::exit(130);
        }
    });
    cancel
}
