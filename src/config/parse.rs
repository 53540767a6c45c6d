//! Parsing with clap over the layers: the command line, then the
//! environment, then the file, then the flags' defaults.

use std::collections::BTreeSet;
use std::ffi::OsString;

use clap::error::ErrorKind;

use super::Invalid;
use super::layers::Layers;
use super::refused::refused;

/// `T` from `args` (the program's name first) and `layers`. A value of the
/// file or the environment that its flag refuses is an [`Invalid`] that
/// names each such setting ([`refused`]), with the file's other problems;
/// a usage error, `--help` and `--version` exit as clap's `parse` does.
pub fn parse<T: clap::Parser>(layers: &Layers, args: Vec<OsString>) -> Result<T, Invalid> {
    let command = layers.command(T::command(), &BTreeSet::new());
    let error = match command.try_get_matches_from(args) {
        Ok(mut matches) => match T::from_arg_matches_mut(&mut matches) {
            Ok(parsed) => return Ok(parsed),
            Err(error) => error,
        },
        Err(error) => error,
    };
    if matches!(
        error.kind(),
        ErrorKind::InvalidValue | ErrorKind::ValueValidation
    ) {
        let refused = refused(layers, &T::command());
        if !refused.is_empty() {
            let problems = (layers.problems().iter().cloned()).chain(refused.into_values());
            return Err(Invalid::new(problems.collect()));
        }
    }
    error.exit()
}
