//! The `roundtrip` command line: one call into the CLI layer.
#![deny(unsafe_code)]

mod cli;

fn main() {
    std::process::exit(cli::main());
}
