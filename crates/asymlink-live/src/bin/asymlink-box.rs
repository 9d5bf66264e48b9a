//! `asymlink-box --config FILE`: the live middlebox (see [`asymlink_live::cli`]).

fn main() -> std::process::ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    std::process::ExitCode::from(asymlink_live::cli::main(&argv))
}
