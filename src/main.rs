//! The `roundtrip` command line: one call into the CLI layer.

mod cli;

fn main() {
    std::process::exit(cli::main());
}
