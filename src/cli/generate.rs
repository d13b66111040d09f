//! `roundtrip generate man|complete-bash|complete-zsh|complete-fish`: man pages and shell completions, built from
//! the same argument definitions the parser uses (clap_mangen, clap_complete), so they cannot disagree with it.

use super::output::{Exit, note};
use anyhow::Context as _;
use clap::{Args, Command, ValueEnum};
use clap_complete::Shell;
use std::io::Write as _;
use std::os::unix::fs::DirBuilderExt;
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
    /// Write into this directory instead of standard output (man: every page; it is created if missing, mode
    /// 0755; files are mode 0644 whatever the umask; a symbolic link is not written through).
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
        make_dir(dir)?;
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
                    let mut buf = Vec::new();
                    clap_complete::generate(shell, &mut cmd, "roundtrip", &mut buf);
                    // bash-completion looks a command's completion up by the command's own name.
                    let name = match shell {
                        Shell::Bash => "roundtrip".to_string(),
                        _ => clap_complete::Generator::file_name(&shell, "roundtrip"),
                    };
                    let path = dir.join(name);
                    write_file(&path, &buf)?;
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
        write_file(&file, &buf)?;
        n += 1;
    }
    Ok(n)
}

/// Man pages and completions are for everyone: directories 0755, files 0644, whatever the umask.
const DIR_MODE: u32 = 0o755;
const FILE_MODE: u32 = 0o644;

/// Creates `dir` and its missing parents, each mode [`DIR_MODE`]; an existing directory is used as it is. A
/// symbolic link or anything else but a directory at `dir` is refused (exit 2).
fn make_dir(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mut missing = Vec::new();
    for d in dir.ancestors().filter(|d| !d.as_os_str().is_empty()) {
        match std::fs::symlink_metadata(d) {
            Ok(m) if m.is_dir() => break,
            Ok(m) if d == dir => {
                let what = if m.file_type().is_symlink() {
                    "a symbolic link"
                } else {
                    "not a directory"
                };
                return Err(super::output::refused(format!(
                    "--dir {}: it is {what}; give a directory, or a new name to create one",
                    dir.display()
                )));
            }
            // A parent that is a link (/usr/share -> ...) is the system's own layout: followed as any path is.
            Ok(_) => break,
            Err(_) => missing.push(d.to_path_buf()),
        }
    }
    for d in missing.iter().rev() {
        std::fs::DirBuilder::new()
            .mode(DIR_MODE)
            .create(d)
            .with_context(|| format!("creating {}", d.display()))?;
        // fchmod on the directory opened without following a link (not chmod on the path, which a link
        // planted since would redirect).
        roundtrip::output_file::at::open_dir(d)
            .and_then(|f| f.set_permissions(std::fs::Permissions::from_mode(DIR_MODE)))
            .with_context(|| format!("creating {}", d.display()))?;
    }
    Ok(())
}

/// Writes one generated file (never through a symbolic link; whole, by a rename), mode [`FILE_MODE`].
fn write_file(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    roundtrip::output_file::write_with_mode(path, bytes, Some(FILE_MODE))
        .with_context(|| format!("writing {}", path.display()))
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
