//! `strata completions`: print a shell completion script generated from the command definition.

use clap::Args;
use clap_complete::Shell;

use crate::error::CliError;
use crate::output::Output;

const AFTER_HELP: &str = "\
Examples:
  strata completions bash > ~/.local/share/bash-completion/completions/strata
  strata completions zsh > ~/.zfunc/_strata
  strata completions fish > ~/.config/fish/completions/strata.fish";

/// Arguments of `strata completions`.
#[derive(Debug, Args)]
#[command(after_help = AFTER_HELP)]
pub struct CompletionsArgs {
    /// The shell to generate completions for.
    #[arg(value_enum, value_name = "SHELL")]
    shell: Shell,
}

/// Run `strata completions` for the full command definition `cmd`.
pub fn run(args: &CompletionsArgs, cmd: &mut clap::Command, out: &Output) -> Result<(), CliError> {
    let mut buf = Vec::new();
    clap_complete::generate(args.shell, cmd, "strata", &mut buf);
    let text = String::from_utf8(buf).map_err(|_| {
        CliError::Other("the generated completion script is not UTF-8; please report this".into())
    })?;
    out.result(&text)
}
