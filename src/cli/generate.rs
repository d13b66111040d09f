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

/// Writes what was asked for; `cmd` is the whole command tree, examples attached.
pub fn run(a: GenerateArgs, cmd: Command) -> Result<Exit, anyhow::Error> {
    let mut cmd = cmd;
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
            let mut buf = Vec::new();
            clap_mangen::Man::new(cmd)
                .render(&mut buf)
                .context("rendering the man page")?;
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
    let mut stack = vec![(cmd.clone(), "roundtrip".to_string())];
    while let Some((c, name)) = stack.pop() {
        for sub in c
            .get_subcommands()
            .filter(|s| !s.is_hide_set() && s.get_name() != "help")
        {
            stack.push((sub.clone(), format!("{name}-{}", sub.get_name())));
        }
        let page = c.clone().name(name.clone()).display_name(name.clone());
        let path = dir.join(format!("{name}.1"));
        let mut buf = Vec::new();
        clap_mangen::Man::new(page)
            .render(&mut buf)
            .with_context(|| format!("rendering {name}.1"))?;
        std::fs::write(&path, buf).with_context(|| format!("writing {}", path.display()))?;
        n += 1;
    }
    Ok(n)
}
