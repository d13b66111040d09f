//! `roundtrip generate man|complete-bash|complete-zsh|complete-fish`: man pages and shell completions, built from
//! the same argument definitions the parser uses (clap_mangen, clap_complete), so they cannot disagree with it.

use super::output::{Exit, note};
use anyhow::Context as _;
use clap::{Args, Command, ValueEnum};
use clap_complete::Shell;
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// What `roundtrip generate` writes.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum What {
    /// Man pages: roundtrip.1 and one page per subcommand (roundtrip-ping.1, roundtrip-capture-rpc.1, ...).
    Man,
    /// Bash completion (roundtrip.bash; install as .../bash-completion/completions/roundtrip).
    CompleteBash,
    /// Zsh completion (_roundtrip, for a directory on $fpath).
    CompleteZsh,
    /// Fish completion (roundtrip.fish, for ~/.config/fish/completions).
    CompleteFish,
}

/// Arguments of `roundtrip generate`.
#[derive(Debug, Args)]
pub struct GenerateArgs {
    /// What to generate.
    #[arg(value_enum)]
    what: What,
    /// Write into this directory instead of standard output (man: every page; it is created if missing).
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

/// Writes what was asked for.
pub fn run(a: GenerateArgs) -> Result<Exit, anyhow::Error> {
    // The definitions without the examples appended to each help: the man pages put them in a section of
    // their own (EXAMPLES), formatted as commands rather than filled text.
    let mut cmd = super::definitions();
    cmd.build();
    if let Some(dir) = &a.dir {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    match (a.what, &a.dir) {
        (What::Man, Some(dir)) => {
            let written = man_pages(&cmd, dir)?;
            note(format!(
                "wrote {written} man pages to {} (man roundtrip)",
                dir.display()
            ));
        }
        (What::Man, None) => {
            let buf = page(cmd, "").context("rendering the man page")?;
            std::io::stdout()
                .write_all(&buf)
                .context("writing to standard output")?;
        }
        (shell, dir) => {
            let shell = match shell {
                What::CompleteBash => Shell::Bash,
                What::CompleteZsh => Shell::Zsh,
                _ => Shell::Fish,
            };
            match dir {
                Some(dir) => {
                    let path = clap_complete::generate_to(shell, &mut cmd, "roundtrip", dir)
                        .with_context(|| {
                            format!("writing the {shell} completion into {}", dir.display())
                        })?;
                    // bash-completion looks a command's completion up by the command's own name.
                    let path = if matches!(shell, Shell::Bash) {
                        let to = dir.join("roundtrip");
                        std::fs::rename(&path, &to)
                            .with_context(|| format!("renaming {}", path.display()))?;
                        to
                    } else {
                        path
                    };
                    note(format!("wrote {}", path.display()));
                }
                None => {
                    clap_complete::generate(shell, &mut cmd, "roundtrip", &mut std::io::stdout())
                }
            }
        }
    }
    Ok(Exit::Ok)
}

/// Writes roundtrip.1 and a page for every subcommand, nested ones too (roundtrip-capture-rpc.1); returns how many.
fn man_pages(cmd: &Command, dir: &Path) -> Result<usize, anyhow::Error> {
    let mut n = 0;
    let mut stack = vec![(cmd.clone(), String::new())];
    while let Some((c, path)) = stack.pop() {
        for sub in c
            .get_subcommands()
            .filter(|s| !s.is_hide_set() && s.get_name() != "help")
        {
            let sub_path = if path.is_empty() {
                sub.get_name().to_string()
            } else {
                format!("{path} {}", sub.get_name())
            };
            stack.push((sub.clone(), sub_path));
        }
        let name = page_name(&path);
        let file = dir.join(format!("{name}.1"));
        let buf = page(c, &path).with_context(|| format!("rendering {name}.1"))?;
        std::fs::write(&file, buf).with_context(|| format!("writing {}", file.display()))?;
        n += 1;
    }
    Ok(n)
}

/// `roundtrip-capture-rpc` for the path "capture rpc".
fn page_name(path: &str) -> String {
    std::iter::once("roundtrip")
        .chain(path.split(' ').filter(|w| !w.is_empty()))
        .collect::<Vec<_>>()
        .join("-")
}

/// One man page: clap_mangen's sections, then EXAMPLES from src/cli/examples.rs.
fn page(cmd: Command, path: &str) -> std::io::Result<Vec<u8>> {
    let name = page_name(path);
    let has_args = cmd.get_arguments().any(|a| !a.is_hide_set());
    let has_subs = cmd.get_subcommands().any(|s| !s.is_hide_set());
    let has_extra = cmd.get_after_help().is_some() || cmd.get_after_long_help().is_some();
    let has_version = cmd.get_version().is_some() || cmd.get_long_version().is_some();
    let man = clap_mangen::Man::new(cmd.name(name.clone()).display_name(name));
    let mut buf = Vec::new();
    man.render_title(&mut buf)?;
    man.render_name_section(&mut buf)?;
    man.render_synopsis_section(&mut buf)?;
    man.render_description_section(&mut buf)?;
    if has_args {
        man.render_options_section(&mut buf)?;
    }
    if has_subs {
        man.render_subcommands_section(&mut buf)?;
    }
    if has_extra {
        man.render_extra_section(&mut buf)?;
    }
    if let Some((_, examples)) = super::examples::EXAMPLES.iter().find(|(p, _)| *p == path) {
        buf.extend_from_slice(b".SH EXAMPLES\n");
        for (line, what) in *examples {
            buf.extend_from_slice(
                format!(
                    ".TP\n\\fB{}\\fR\n{}\n",
                    roff_escape(line),
                    roff_escape(what)
                )
                .as_bytes(),
            );
        }
    }
    if has_version {
        man.render_version_section(&mut buf)?;
    }
    Ok(buf)
}

/// Text as roff reads it literally: backslashes and hyphens escaped, no line starting as a request.
fn roff_escape(s: &str) -> String {
    let e = s.replace('\\', "\\e").replace('-', "\\-");
    if e.starts_with('.') || e.starts_with('\'') {
        format!("\\&{e}")
    } else {
        e
    }
}
